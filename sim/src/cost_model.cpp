// Compute-node durations for the replay: measured table first, roofline otherwise.
#include "ht/sim/cost_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/sim/error.hpp"

namespace ht::sim {

namespace {

[[noreturn]] void fail(const std::string& message) { throw SimError(SimErrorCode::BadCosts, message); }

// Upper bound of every cost figure (microseconds, factors, rows, bytes): 1e12 us is 11 days, far
// beyond any kernel; larger values only overflow the twin's sums and integer conversions.
constexpr double kMaxCostValue = 1e12;

// A number for a message: shortest round-trip form ("1e+300", "0.5"), never 300 digits.
std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

double checked(std::string_view key, double v, double min) {
  if (!std::isfinite(v) || v < min || v > kMaxCostValue)
    fail("'" + std::string(key) + "' must be a finite number in [" + number_text(min) + ", 1e12], got " + number_text(v));
  return v;
}

double number_field(const nlohmann::json& j, std::string_view key) {
  if (!j.is_number()) fail("'" + std::string(key) + "' must be a number");
  return j.get<double>();
}

}  // namespace

namespace {
// The measured_s entry of a node (most specific key first), or end().
auto measured_entry(const std::map<std::string, double, std::less<>>& table, const schedule::Node& node) {
  if (table.empty()) return table.end();
  const std::string slot(schedule::to_string(node.slot));
  const std::string phase(schedule::to_string(node.phase));
  for (const std::string& key : {slot + "/" + phase + "/" + node.symbols, slot + "/" + phase, slot}) {
    if (auto it = table.find(key); it != table.end()) return it;
  }
  return table.end();
}
}  // namespace

const double* CostModel::measured_for(const schedule::Node& node) const {
  const auto it = measured_entry(measured_s, node);
  return it == measured_s.end() ? nullptr : &it->second;
}

CommWork CostModel::comm_work(const schedule::Node& node) const {
  if (comm_work_s.empty()) return {};
  const auto it = comm_work_s.find(std::string(schedule::to_string(node.slot)) + "/" +
                                   std::string(schedule::to_string(node.phase)));
  return it == comm_work_s.end() ? CommWork{} : it->second;
}

std::string CostModel::instance_key(const schedule::Node& node) {
  return std::to_string(node.rank) + "/" + node.label();
}

const MeasuredInstance* CostModel::instance_for(const schedule::Node& node) const {
  if (instances.empty()) return nullptr;
  const auto it = instances.find(instance_key(node));
  return it == instances.end() ? nullptr : &it->second;
}

double speed_beside_comm(const CostModel& costs, const PlatformSpec& platform, double held_sms) {
  if (costs.interference_factor > 1) return 1 / costs.interference_factor;
  const double sms = platform.gpu.sms;
  if (platform.host_cores > 0 || sms <= 0) return 1;
  const double held = std::min(held_sms, sms - 1);
  const MeasuredKernels* m = platform.gpu.measured.get();
  if (m == nullptr || m->sharing_sms.empty() || held <= 0) return (sms - held) / sms * platform.gpu.overlap_clock;
  // Measured GEMMs beside held SMs: linear in the SMs held between (0, 1) and the measured
  // points; beyond the last, that point's speed shrunk as the rule shrinks, (S - s)/(S - s_last).
  const auto& at = m->sharing_sms;
  const auto& speed = m->sharing_speed;
  double share = 0;
  if (held >= at.back()) {
    share = speed.back() * (sms - held) / std::max(1.0, sms - at.back());
  } else {
    double s0 = 0, v0 = 1;
    std::size_t i = 0;
    while (at[i] <= held) {
      s0 = at[i];
      v0 = speed[i];
      ++i;
    }
    share = v0 + (speed[i] - v0) * (held - s0) / (at[i] - s0);
  }
  return std::min(1.0, share) * platform.gpu.overlap_clock;
}

double CostModel::host_seconds(const schedule::Work& work, schedule::Phase phase, bool delay_wgrad,
                               bool cuda_graphs) const {
  double seconds = 0;
  for (const schedule::Kernel& k : work.kernels) {
    const int launches = kernel_launches(k, phase, delay_wgrad);
    if (launches == 0) continue;
    if (k.kind == schedule::KernelKind::GroupedGemm) {
      // One Python call per grouped GEMM, then every expert's GEMM from TE's C++ loop. Dropless
      // expert GEMMs are not capturable in a CUDA graph (physics.md 3).
      const double calls = launches / std::max(1.0, k.groups);
      seconds += calls * host_launch_s + launches * grouped_launch_s;
    } else if (!cuda_graphs) {
      seconds += launches * host_launch_s;
    }
  }
  return seconds;
}

double CostModel::compute_seconds(const schedule::Node& node, const GpuSpec& gpu, const schedule::Work* work,
                                  bool delay_wgrad, bool cuda_graphs) const {
  auto it = measured_entry(measured_s, node);
  // A W node without an entry of its own: its slot's backward (the same microbatch's B node for
  // the measured rows), scaled to the W node's FLOPs below.
  schedule::Node backward;
  const schedule::Node* priced_as = &node;
  if (it == measured_s.end() && node.phase == schedule::Phase::Weight) {
    backward = node;
    backward.phase = schedule::Phase::Backward;
    it = measured_entry(measured_s, backward);
    priced_as = &backward;
  }
  if (it != measured_s.end()) {
    double seconds = it->second;
    const auto scale = row_scaling.find(it->first);
    const MeasuredInstance* inst = scale == row_scaling.end() ? nullptr : instance_for(*priced_as);
    if (inst != nullptr && inst->rows >= 0)
      seconds = std::max(0.0, it->second + scale->second.per_row_s * (inst->rows - scale->second.mean_rows));
    const auto f = measured_flops.find(it->first);
    if (node.phase != schedule::Phase::Forward && f != measured_flops.end() && f->second > 0 && node.flops > 0)
      seconds *= node.flops / f->second;
    return seconds;
  }
  if (node.flops <= 0 && node.mem_bytes <= 0) return 0;  // an empty slot launches nothing
  if (work != nullptr && !work->kernels.empty()) {
    const double t = work_seconds(*work, node.phase, delay_wgrad, gpu);
    // The host issues the node's kernels while the GPU runs them: the node takes the longer of
    // the two (a host that falls behind leaves the GPU idle between kernels).
    // The slowest GPU of the synchronous step sets its pace (GpuSpec::slow_gpu_spread).
    const double slowest = t / (1 - gpu.slow_gpu_spread);
    // Offloaded activations cross the host link beside the kernels: D2H after the forward, H2D
    // ahead of the backward. A node no faster than its share of the copies.
    double copy = 0;
    if (node.phase == schedule::Phase::Forward || node.phase == schedule::Phase::Backward)
      for (const schedule::Kernel& k : work->kernels)
        if (k.kind == schedule::KernelKind::HostCopy) copy += k.bytes / gpu.host_link_bytes_per_s;
    return t > 0 ? std::max({slowest, host_seconds(*work, node.phase, delay_wgrad, cuda_graphs), copy}) +
                       launch_overhead_s
                 : 0;
  }
  const double math = node.flops / (gpu.peak_flops * gpu.flops_efficiency);
  const double memory = node.mem_bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency);
  return std::max(math, memory) + launch_overhead_s;
}

void set_cost_key(CostModel& model, std::string_view key, std::string_view value) {
  double v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size())
    fail("value of '" + std::string(key) + "' is not a number: '" + std::string(value) + "'");
  if (key == "launch_overhead_us") model.launch_overhead_s = checked(key, v, 0) * 1e-6;
  else if (key == "host_launch_us") model.host_launch_s = checked(key, v, 0) * 1e-6;
  else if (key == "grouped_launch_us") model.grouped_launch_s = checked(key, v, 0) * 1e-6;
  else if (key == "comm_launch_us") model.comm_launch_s = checked(key, v, 0) * 1e-6;
  else if (key == "interference_factor") model.interference_factor = checked(key, v, 1);
  else if (key == "wake_latency_us") model.wake_latency_s = checked(key, v, 0) * 1e-6;
  else
    fail("unknown cost key '" + std::string(key) +
         "' (known: launch_overhead_us, host_launch_us, grouped_launch_us, comm_launch_us, interference_factor, "
         "wake_latency_us)");
}

namespace {

// A kernel table's grouped-GEMM grid (kernel_table.hpp): experts x rows x shapes seconds.
void parse_grouped(const nlohmann::json& g, MeasuredKernels& k) {
  if (!g.is_object()) fail("'kernel_table.grouped' must be an object {experts, rows, shapes, seconds}");
  auto ascending = [&](const char* name, std::vector<double>& into) {
    const std::string field = std::string("kernel_table.grouped.") + name;
    if (!g.contains(name) || !g[name].is_array() || g[name].empty() || g[name].size() > 16)
      fail("'" + field + "' must be an array of 1 to 16 ascending numbers");
    for (const auto& v : g[name]) {
      const double x = checked(field, number_field(v, field), 1);
      if (!into.empty() && x <= into.back()) fail("'" + field + "' must be strictly ascending");
      into.push_back(x);
    }
  };
  ascending("experts", k.grouped_experts);
  ascending("rows", k.grouped_rows);
  if (!g.contains("shapes") || !g["shapes"].is_array() || g["shapes"].empty() || g["shapes"].size() > 16)
    fail("'kernel_table.grouped.shapes' must be an array of 1 to 16 [k, n] pairs");
  for (const auto& v : g["shapes"]) {
    if (!v.is_array() || v.size() != 2) fail("'kernel_table.grouped.shapes' must be an array of 1 to 16 [k, n] pairs");
    k.grouped_shapes.emplace_back(
        checked("kernel_table.grouped.shapes", number_field(v[0], "kernel_table.grouped.shapes"), 1),
        checked("kernel_table.grouped.shapes", number_field(v[1], "kernel_table.grouped.shapes"), 1));
  }
  const std::size_t cells = k.grouped_experts.size() * k.grouped_rows.size() * k.grouped_shapes.size();
  if (!g.contains("seconds") || !g["seconds"].is_array() || g["seconds"].size() != cells)
    fail("'kernel_table.grouped.seconds' must hold experts x rows x shapes = " + std::to_string(cells) + " numbers");
  for (const auto& v : g["seconds"]) {
    const double x = checked("kernel_table.grouped.seconds", number_field(v, "kernel_table.grouped.seconds"), 0);
    if (!(x > 0)) fail("'kernel_table.grouped.seconds' holds a time that is not positive");
    k.grouped_seconds.push_back(x);
  }
}

}  // namespace

CostModel parse_costs_json(std::string_view json_text, CostModel base) {
  nlohmann::json j;
  try {
    j = io::parse_json(json_text, "the cost file");
  } catch (const io::IoError& e) {
    fail(e.what());
  }
  if (!j.is_object()) fail("the cost file must hold a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "launch_overhead_us" || key == "comm_launch_us" || key == "interference_factor" ||
        key == "wake_latency_us" || key == "host_launch_us" || key == "grouped_launch_us") {
      std::ostringstream text;
      text.precision(17);
      text << number_field(value, key);
      set_cost_key(base, key, text.str());
    } else if (key == "durations_us") {
      if (!value.is_object()) fail("'durations_us' must map \"slot[/phase[/symbols]]\" to microseconds");
      for (const auto& [node_kind, us] : value.items())
        base.measured_s[node_kind] = checked(node_kind, number_field(us, node_kind), 0) * 1e-6;
    } else if (key == "comm_work_us") {
      if (!value.is_object())
        fail("'comm_work_us' must map \"slot/phase\" to microseconds or {\"before\": us, \"after\": us}");
      for (const auto& [node_kind, w] : value.items()) {
        CommWork work;
        if (w.is_number()) {
          work.after_s = checked(node_kind, number_field(w, node_kind), 0) * 1e-6;
        } else if (w.is_object()) {
          for (const auto& [part, us] : w.items()) {
            const double v = checked(node_kind + "." + part, number_field(us, node_kind + "." + part), 0) * 1e-6;
            if (part == "before") work.before_s = v;
            else if (part == "after") work.after_s = v;
            else fail("'comm_work_us' entry '" + node_kind + "': unknown part '" + part + "' (before, after)");
          }
        } else {
          fail("'comm_work_us' entry '" + node_kind + "' must be a number or {\"before\": us, \"after\": us}");
        }
        base.comm_work_s[node_kind] = work;
      }
    } else if (key == "rows_us") {
      if (!value.is_object()) fail("'rows_us' must map \"slot[/phase[/symbols]]\" to {per_row_us, mean_rows}");
      for (const auto& [node_kind, r] : value.items()) {
        if (!r.is_object() || !r.contains("per_row_us") || !r.contains("mean_rows"))
          fail("'rows_us' entry '" + node_kind + "' must be {\"per_row_us\": .., \"mean_rows\": ..}");
        base.row_scaling[node_kind] = {checked(node_kind + ".per_row_us", number_field(r["per_row_us"], node_kind + ".per_row_us"), -kMaxCostValue) * 1e-6,
                                       checked(node_kind, number_field(r["mean_rows"], node_kind + ".mean_rows"), 0)};
      }
    } else if (key == "flops") {
      if (!value.is_object()) fail("'flops' must map \"slot/phase[/symbols]\" to the planned FLOPs measured");
      for (const auto& [node_kind, f] : value.items())
        base.measured_flops[node_kind] = checked(node_kind, number_field(f, node_kind), 0);
    } else if (key == "kernel_table") {
      if (!value.is_object()) fail("'kernel_table' must be an object (written by `hybrid-twin calibrate --gpu`)");
      MeasuredKernels k;
      if (value.contains("device") && value["device"].is_string()) k.device = value["device"].get<std::string>();
      if (value.contains("emulated") && value["emulated"].is_boolean()) k.emulated = value["emulated"].get<bool>();
      if (!value.contains("sizes") || !value["sizes"].is_array() || value["sizes"].size() < 2 || value["sizes"].size() > 16)
        fail("'kernel_table.sizes' must be an array of 2 to 16 ascending sizes");
      for (const auto& v : value["sizes"]) {
        const double s = checked("kernel_table.sizes", number_field(v, "kernel_table.sizes"), 1);
        if (!k.sizes.empty() && s <= k.sizes.back()) fail("'kernel_table.sizes' must be strictly ascending");
        k.sizes.push_back(s);
      }
      const std::size_t n = k.sizes.size();
      if (!value.contains("gemm_bf16_tflops") || !value["gemm_bf16_tflops"].is_array() ||
          value["gemm_bf16_tflops"].size() != n * n * n)
        fail("'kernel_table.gemm_bf16_tflops' must hold sizes^3 = " + std::to_string(n * n * n) + " numbers");
      for (const auto& v : value["gemm_bf16_tflops"]) {
        const double r = checked("kernel_table.gemm_bf16_tflops", number_field(v, "kernel_table.gemm_bf16_tflops"), 0);
        if (!(r > 0)) fail("'kernel_table.gemm_bf16_tflops' holds a rate that is not positive");
        k.gemm_bf16_tflops.push_back(r);
      }
      if (!value.contains("hbm_gbps")) fail("'kernel_table.hbm_gbps' is missing");
      k.hbm_bytes_per_s = checked("kernel_table.hbm_gbps", number_field(value["hbm_gbps"], "kernel_table.hbm_gbps"), 0) * 1e9;
      if (!(k.hbm_bytes_per_s > 0)) fail("'kernel_table.hbm_gbps' must be positive");
      if (value.contains("grouped")) parse_grouped(value["grouped"], k);
      if (value.contains("sm_sharing")) {
        const auto& h = value["sm_sharing"];
        const std::string what =
            "'kernel_table.sm_sharing' must be {\"sms\": [ascending SMs held], \"speed\": [as many speeds in (0, "
            "1.5]]}";
        if (!h.is_object() || !h.contains("sms") || !h.contains("speed") || !h["sms"].is_array() ||
            !h["speed"].is_array() || h["sms"].empty() || h["sms"].size() > 64 || h["sms"].size() != h["speed"].size())
          fail(what);
        for (std::size_t i = 0; i < h["sms"].size(); ++i) {
          const double held =
              checked("kernel_table.sm_sharing.sms", number_field(h["sms"][i], "kernel_table.sm_sharing.sms"), 1);
          const double speed =
              checked("kernel_table.sm_sharing.speed", number_field(h["speed"][i], "kernel_table.sm_sharing.speed"), 0);
          if ((!k.sharing_sms.empty() && held <= k.sharing_sms.back()) || !(speed > 0) || speed > 1.5) fail(what);
          k.sharing_sms.push_back(held);
          k.sharing_speed.push_back(speed);
        }
      }
      if (value.contains("sustained")) {
        const auto& u = value["sustained"];
        if (!u.is_object() || !u.contains("fraction"))
          fail("'kernel_table.sustained' must be an object with a 'fraction' (written by `hybrid-twin calibrate --gpu`)");
        k.sustained_fraction = checked("kernel_table.sustained.fraction",
                                       number_field(u["fraction"], "kernel_table.sustained.fraction"), 0);
        if (k.sustained_fraction != 0 && (k.sustained_fraction < 0.3 || k.sustained_fraction > 2))
          fail("'kernel_table.sustained.fraction' must be 0 (not measured) or in [0.3, 2]");
      }
      if (value.contains("grouped_launch_us")) {
        k.grouped_launch_s = checked("kernel_table.grouped_launch_us",
                                     number_field(value["grouped_launch_us"], "kernel_table.grouped_launch_us"), 0) *
                             1e-6;
        // The GPU's own measure of TE's loop, unless the file sets grouped_launch_us itself.
        if (k.grouped_launch_s > 0 && !j.contains("grouped_launch_us")) base.grouped_launch_s = k.grouped_launch_s;
      }
      base.kernels = std::make_shared<const MeasuredKernels>(std::move(k));
    } else if (key == "instances") {
      if (!value.is_object()) fail("'instances' must map \"<rank>/<node label>\" to {rows, sent_bytes}");
      for (const auto& [name, v] : value.items()) {
        if (!v.is_object()) fail("instance '" + name + "' must be an object");
        MeasuredInstance inst;
        for (const auto& [field, x] : v.items()) {
          if (field == "rows") {
            inst.rows = static_cast<int>(checked(name + ".rows", number_field(x, name + ".rows"), 0));
          } else if (field == "sent_bytes") {
            if (!x.is_object()) fail("instance '" + name + "': 'sent_bytes' must map peer rank to bytes");
            inst.has_sends = true;
            for (const auto& [peer, bytes] : x.items()) {
              int rank = -1;
              auto [end, ec] = std::from_chars(peer.data(), peer.data() + peer.size(), rank);
              if (ec != std::errc() || end != peer.data() + peer.size() || rank < 0)
                fail("instance '" + name + "': peer '" + peer + "' is not a rank");
              inst.sends.push_back({rank, checked(name + ".sent_bytes", number_field(bytes, name + ".sent_bytes"), 0)});
            }
          } else {
            fail("instance '" + name + "': unknown field '" + field + "' (known: rows, sent_bytes)");
          }
        }
        base.instances[name] = std::move(inst);
      }
    } else if (key.empty() || key.front() != '_') {  // "_comment" and friends are allowed
      fail("unknown field '" + key +
           "' (known: launch_overhead_us, host_launch_us, grouped_launch_us, comm_launch_us, interference_factor, "
           "wake_latency_us, durations_us, kernel_table, "
           "comm_work_us, rows_us, flops, instances)");
    }
  }
  return base;
}

void apply_kernel_table(PlatformSpec& platform, const CostModel& costs) {
  if (!costs.kernels) return;
  platform.gpu.measured = costs.kernels;
  platform.gpu.hbm_efficiency = std::min(1.0, costs.kernels->hbm_bytes_per_s / platform.gpu.hbm_bytes_per_s);
  // Sustained load: the burst-measured compute rates at the GPU's sustained fraction (GEMMs in
  // kernel_time.cpp's measured branch), and the clock under overlap, given over the burst clock,
  // relative to the sustained one (a GPU already held below its burst clock loses less).
  const double f = costs.kernels->sustained_fraction;
  if (f > 0 && f < 1) {
    platform.gpu.attention_scale *= f;
    platform.gpu.scan_efficiency *= f;
    platform.gpu.delta_rule_scale *= f;
    platform.gpu.overlap_clock = std::min(1.0, platform.gpu.overlap_clock / f);
  }
}

CostModel load_costs_file(const std::string& path, CostModel base) {
  std::string text;
  try {
    text = io::read_input_file(path, io::kJsonFileLimit, "cost file");
  } catch (const io::IoError& e) {
    fail(e.what());
  }
  try {
    return parse_costs_json(text, std::move(base));
  } catch (const SimError& e) {
    fail(path + ": " + e.detail());
  }
}

}  // namespace ht::sim
