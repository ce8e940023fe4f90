// Spec-sheet side of the platform: presets, "PRESET:k=v" parsing and validation. No SimGrid here;
// platform_build.cpp turns the validated spec into SimGrid zones.
#include "ht/sim/platform.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

#include "ht/sim/error.hpp"

namespace ht::sim {

std::string_view to_string(SimErrorCode code) {
  switch (code) {
    case SimErrorCode::BadPlatform: return "bad platform";
    case SimErrorCode::BadCosts: return "bad cost model";
    case SimErrorCode::BadPlan: return "bad plan";
    case SimErrorCode::Deadlock: return "deadlock";
  }
  return "sim error";
}

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw SimError(SimErrorCode::BadPlatform, message);
}

double parse_number(std::string_view key, std::string_view text) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v))
    fail("value of '" + std::string(key) + "' is not a number: '" + std::string(text) + "'");
  return v;
}

double positive(std::string_view key, std::string_view text) {
  double v = parse_number(key, text);
  if (v <= 0) fail("'" + std::string(key) + "' must be > 0, got " + std::string(text));
  return v;
}

double fraction(std::string_view key, std::string_view text) {
  double v = parse_number(key, text);
  if (v <= 0 || v > 1) fail("'" + std::string(key) + "' must be in (0, 1], got " + std::string(text));
  return v;
}

// A physical magnitude: far outside any hardware (peak_tflops=1e-30 gave a 4.9e33 s step, 1e-300
// a SimGrid "deadlock") is refused naming the range.
double magnitude(std::string_view key, std::string_view text, double lo, double hi, const char* unit) {
  const double v = parse_number(key, text);
  if (!(v >= lo && v <= hi)) {
    std::ostringstream range;
    range << lo << ", " << hi;
    fail("'" + std::string(key) + "' = " + std::string(text.substr(0, 40)) + " is outside [" + range.str() + "] " + unit);
  }
  return v;
}

int count(std::string_view key, std::string_view text, int min) {
  double v = parse_number(key, text);
  if (v != std::floor(v) || v < min || v > 1 << 20)
    fail("'" + std::string(key) + "' must be an integer >= " + std::to_string(min) + ", got " +
         std::string(text));
  return static_cast<int>(v);
}

using Setter = std::function<void(PlatformSpec&, std::string_view, std::string_view)>;

const std::map<std::string, Setter, std::less<>>& setters() {
  static const std::map<std::string, Setter, std::less<>> table = {
      {"nodes", [](PlatformSpec& s, auto k, auto v) { s.nodes = count(k, v, 0); }},
      {"gpus_per_node", [](PlatformSpec& s, auto k, auto v) { s.gpus_per_node = count(k, v, 1); }},
      {"nvlink_gbps", [](PlatformSpec& s, auto k, auto v) { s.nvlink_bytes_per_s = magnitude(k, v, 1e-3, 1e7, "GB/s") * 1e9; }},
      {"nvlink_efficiency", [](PlatformSpec& s, auto k, auto v) { s.nvlink_efficiency = fraction(k, v); }},
      {"nvlink_latency_us", [](PlatformSpec& s, auto k, auto v) { s.nvlink_latency_s = magnitude(k, v, 0, 1e6, "us") * 1e-6; }},
      {"ib_gbps", [](PlatformSpec& s, auto k, auto v) { s.nic_bytes_per_s = magnitude(k, v, 1e-3, 1e7, "Gb/s") * 1e9 / 8; }},
      {"ib_efficiency", [](PlatformSpec& s, auto k, auto v) { s.nic_efficiency = fraction(k, v); }},
      {"ib_latency_us", [](PlatformSpec& s, auto k, auto v) { s.nic_latency_s = magnitude(k, v, 0, 1e6, "us") * 1e-6; }},
      {"oversubscription", [](PlatformSpec& s, auto k, auto v) {
         s.oversubscription = magnitude(k, v, 1, 1e3, "(1 = full bisection)");
       }},
      {"nvlink_ingress", [](PlatformSpec& s, auto k, auto v) { s.nvlink_ingress = count(k, v, 0) != 0; }},
      {"host_cores", [](PlatformSpec& s, auto k, auto v) { s.host_cores = count(k, v, 0); }},
      {"comm_priority", [](PlatformSpec& s, auto k, auto v) { s.comm_priority = count(k, v, 0) != 0; }},
      {"peak_tflops", [](PlatformSpec& s, auto k, auto v) { s.gpu.peak_flops = magnitude(k, v, 0.1, 1e6, "TFLOP/s") * 1e12; }},
      {"flops_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.flops_efficiency = fraction(k, v); }},
      {"hbm_tbps", [](PlatformSpec& s, auto k, auto v) { s.gpu.hbm_bytes_per_s = magnitude(k, v, 1e-3, 1e3, "TB/s") * 1e12; }},
      {"hbm_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.hbm_efficiency = fraction(k, v); }},
      {"hbm_gb", [](PlatformSpec& s, auto k, auto v) { s.gpu.hbm_bytes = magnitude(k, v, 0.1, 1e5, "GB") * 1e9; }},
      {"sms", [](PlatformSpec& s, auto k, auto v) { s.gpu.sms = count(k, v, 1); }},
      {"gemm_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.gemm_efficiency = fraction(k, v); }},
      {"attention_scale", [](PlatformSpec& s, auto k, auto v) {
         s.gpu.attention_scale = positive(k, v);
         if (s.gpu.attention_scale > 1.6) fail("'attention_scale' must be <= 1.6 (efficiency above peak), got " + std::string(v));
       }},
      {"scan_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.scan_efficiency = fraction(k, v); }},
      {"overlap_clock", [](PlatformSpec& s, auto k, auto v) { s.gpu.overlap_clock = fraction(k, v); }},
      {"delta_rule_scale", [](PlatformSpec& s, auto k, auto v) { s.gpu.delta_rule_scale = magnitude(k, v, 0.01, 40, "x the H100's rate"); }},
      {"fp8_peak_tflops", [](PlatformSpec& s, auto k, auto v) { s.gpu.fp8_peak_flops = magnitude(k, v, 0.1, 1e6, "TFLOP/s") * 1e12; }},
      {"fp8_gemm_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.fp8_gemm_efficiency = fraction(k, v); }},
      {"permute_efficiency", [](PlatformSpec& s, auto k, auto v) { s.gpu.permute_efficiency = fraction(k, v); }},
      {"host_link_gbs", [](PlatformSpec& s, auto k, auto v) {
         s.gpu.host_link_bytes_per_s = magnitude(k, v, 0.1, 1e5, "GB/s") * 1e9;
       }},
      {"nccl_sms", [](PlatformSpec& s, auto k, auto v) { s.gpu.nccl_sms = count(k, v, 0); }},
      {"slow_gpu_spread", [](PlatformSpec& s, auto k, auto v) {
         s.gpu.slow_gpu_spread = parse_number(k, v);
         if (!(s.gpu.slow_gpu_spread >= 0 && s.gpu.slow_gpu_spread < 0.5))
           fail("'slow_gpu_spread' must be in [0, 0.5), got " + std::string(v));
       }},
  };
  return table;
}

// nodes x gpus_per_node in 64 bits: each may be up to 2^20 alone, their product must stay below
// the plan's rank limit.
void check_size(const PlatformSpec& s) {
  if (s.gpus() > kMaxPlatformGpus)
    fail("platform '" + s.name + "' has nodes " + std::to_string(s.nodes) + " x gpus_per_node " +
         std::to_string(s.gpus_per_node) + " = " + std::to_string(s.gpus()) + " GPUs, more than the limit of " +
         std::to_string(kMaxPlatformGpus));
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"dgx-h100", "dgx-h200", "dgx-h800", "dgx-b200", "gb200-nvl72", "cpu-ranks"};
}

std::vector<std::string> platform_keys() {
  std::vector<std::string> keys;
  for (const auto& [k, _] : setters()) keys.push_back(k);
  return keys;
}

PlatformSpec preset(std::string_view name) {
  PlatformSpec s;  // defaults are the DGX H100 sheet
  if (name == "dgx-h100") {
    s.name = "dgx-h100";
    return s;
  }
  if (name == "dgx-h200") {
    // Same Hopper die and NVLink 4 / NDR fabric; only the memory system differs (141 GB HBM3e).
    s.name = "dgx-h200";
    s.gpu.hbm_bytes_per_s = 4.8e12;
    s.gpu.hbm_bytes = 143771.0 * (1 << 20);  // "141 GB": nvidia-smi's total on an H200 SXM
    s.gpu.fp8_gemm_efficiency = 0.734;  // MAMF: 1453.4 of 1979 TFLOP/s
    return s;
  }
  if (name == "dgx-h800") {
    // The export Hopper: the H100 SXM die and HBM3 with NVLink cut to 400 GB/s both ways (200 per
    // direction), of which DeepEP's maintainers measure about 160 achievable (DeepEP issue 16,
    // docs/legacy.md); 8 x 400 Gb/s CX7 as DeepSeek's cluster (DeepSeek-V3 report, 3.1).
    s.name = "dgx-h800";
    s.nvlink_bytes_per_s = 200e9;
    s.nvlink_efficiency = 0.8;
    return s;
  }
  if (name == "dgx-b200" || name == "gb200-nvl72") {
    // Blackwell (platform.hpp lists the sources). Flash attention: FlashAttention-4 reaches 71 %
    // of the B200 peak at long sequences where FlashAttention-3 reaches 65.5 % of the H100's.
    const bool rack = name == "gb200-nvl72";
    s.name = std::string(name);
    s.gpus_per_node = rack ? 72 : 8;  // one NVLink domain
    s.nvlink_bytes_per_s = 900e9;
    s.nvlink_efficiency = 0.81;  // DeepEP on B200: 726-740 of 900 GB/s
    s.gpu.peak_flops = rack ? 2500e12 : 2250e12;
    s.gpu.sms = rack ? 152 : 148;
    s.gpu.hbm_bytes_per_s = 8e12;
    // B200 "180 GB": 183359 MiB in nvidia-smi; GB200 "186 GB": no driver figure found, the sheet's.
    s.gpu.hbm_bytes = rack ? 186e9 : 183359.0 * (1 << 20);
    s.gpu.gemm_efficiency = rack ? 0.729 : 0.776;  // MAMF best-shape BF16: GB200 72.9 %, B200 77.6 %
    // FP8 dense peak twice BF16's (DGX B200 datasheet 4.5 PFLOPS; GB200 5 PFLOPS); best shape
    // 76.3 % on B200 (MAMF), GB200 scaled by its BF16 ratio (derived).
    s.gpu.fp8_peak_flops = 2 * s.gpu.peak_flops;
    s.gpu.fp8_gemm_efficiency = rack ? 0.763 * 0.729 / 0.776 : 0.763;
    s.gpu.mxfp8 = true;
    if (rack) s.gpu.host_link_bytes_per_s = 225e9;  // NVLink-C2C (GpuSpec::host_link_bytes_per_s)
    s.gpu.attention_scale = 0.71 / 0.655;
    s.gpu.delta_rule_scale = 1.58;
    s.gpu.overlap_clock = 1;  // no published clock under overlap (platform.hpp)
    return s;
  }
  if (name == "cpu-ranks") {
    // The CPU backend on one machine: no NVSwitch port limit on the receive side, the throttle's
    // nominal rate is what a message gets, and one host (node) holds every rank.
    s.name = "cpu-ranks";
    s.gpus_per_node = 1024;
    s.nvlink_efficiency = 1;
    s.nvlink_ingress = false;
    s.host_cores = 1;
    s.gpu.slow_gpu_spread = 0;  // the calibrated CPU ranks: measured durations already
    s.gpu.overlap_clock = 1;
    return s;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("unknown platform preset '" + std::string(name) + "' (known: " + known +
       ", or a SimGrid .xml file)");
}

void set_platform_key(PlatformSpec& spec, std::string_view key, std::string_view value) {
  auto it = setters().find(key);
  if (it == setters().end()) {
    std::string known;
    for (const auto& k : platform_keys()) known += (known.empty() ? "" : ", ") + k;
    fail("unknown platform key '" + std::string(key) + "' (known: " + known + ")");
  }
  it->second(spec, key, value);
}

PlatformSpec parse_platform(std::string_view text) {
  if (text.empty()) fail("empty platform text");
  // A ':' after ".xml" separates overrides from the file name; paths may contain ':' otherwise
  // only in the preset case, where presets have no ':' of their own.
  std::string_view head = text, tail;
  if (auto xml = text.find(".xml"); xml != std::string_view::npos) {
    head = text.substr(0, xml + 4);
    tail = text.substr(xml + 4);
    if (!tail.empty() && tail.front() != ':') fail("expected ':' after the XML file name in '" + std::string(text) + "'");
    if (!tail.empty()) tail.remove_prefix(1);
  } else if (auto colon = text.find(':'); colon != std::string_view::npos) {
    head = text.substr(0, colon);
    tail = text.substr(colon + 1);
  }
  PlatformSpec spec;
  if (head.size() > 4 && head.substr(head.size() - 4) == ".xml") {
    spec.name = std::string(head);
    spec.xml_file = std::string(head);
  } else {
    spec = preset(head);
  }
  std::vector<std::string_view> keys;  // a key given twice would leave only its last value
  while (!tail.empty()) {
    auto comma = tail.find(',');
    std::string_view item = tail.substr(0, comma);
    tail = comma == std::string_view::npos ? std::string_view{} : tail.substr(comma + 1);
    auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      fail("expected key=value in platform overrides, got '" + std::string(item) + "'");
    const std::string_view key = item.substr(0, eq);
    if (std::find(keys.begin(), keys.end(), key) != keys.end())
      fail("platform key '" + std::string(key) + "' is given twice in '" + std::string(text) + "'; give it once");
    keys.push_back(key);
    set_platform_key(spec, key, item.substr(eq + 1));
  }
  check_size(spec);
  return spec;
}

PlatformSpec sized_for(PlatformSpec spec, int world) {
  if (world < 1) fail("a plan needs at least one rank");
  if (!spec.xml_file.empty()) return spec;  // size checked against the file's hosts when built
  check_size(spec);
  if (spec.nodes == 0) spec.nodes = (world + spec.gpus_per_node - 1) / spec.gpus_per_node;
  if (spec.gpus() < world)
    fail("platform '" + spec.name + "' has " + std::to_string(spec.gpus()) + " GPUs (" +
         std::to_string(spec.nodes) + " nodes x " + std::to_string(spec.gpus_per_node) +
         ") but the plan needs " + std::to_string(world));
  return spec;
}

std::string describe(const PlatformSpec& s) {
  std::ostringstream o;
  o << "platform " << s.name << "\n";
  if (!s.xml_file.empty()) o << "  network from " << s.xml_file << " (hosts gpu0..gpuN-1)\n";
  else {
    o << "  nodes " << s.nodes << " x gpus_per_node " << s.gpus_per_node << " = " << s.gpus() << " GPUs\n"
      << "  nvlink_gbps " << s.nvlink_bytes_per_s / 1e9 << " GB/s/dir x efficiency " << s.nvlink_efficiency
      << ", latency " << s.nvlink_latency_s * 1e6 << " us\n"
      << "  ib_gbps " << s.nic_bytes_per_s * 8 / 1e9 << " Gb/s/dir/GPU x efficiency " << s.nic_efficiency
      << ", latency " << s.nic_latency_s * 1e6 << " us, oversubscription " << s.oversubscription << "\n";
    if (!s.nvlink_ingress) o << "  nvlink_ingress 0: receivers are not limited\n";
  }
  if (s.host_cores > 0)
    o << "  host_cores " << s.host_cores << ": all ranks' compute shares these CPU cores"
      << (s.comm_priority ? ", comm-stream work first" : ", comm-stream work shares equally") << "\n";
  o << "  peak_tflops " << s.gpu.peak_flops / 1e12 << " (" << s.gpu.sms << " SMs, best GEMM at "
    << s.gpu.gemm_efficiency << " of peak), hbm " << std::round(s.gpu.hbm_bytes / (1 << 30) * 100) / 100 << " GiB at " << s.gpu.hbm_bytes_per_s / 1e12
    << " TB/s x efficiency " << s.gpu.hbm_efficiency << "\n";
  return o.str();
}

}  // namespace ht::sim
