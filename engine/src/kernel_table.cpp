// Kernel tables (see kernel_table.hpp): the JSON form and the host emulation; the GPU side is in
// engine/cuda/src/kernel_bench.cu.
#include "ht/engine/kernel_table.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <thread>

#include "ht/engine/cpu/gemm.hpp"

namespace ht::engine {
namespace {

template <class F>
double fastest_seconds(int repeats, F&& run) {
  run();  // warm-up
  double best = 1e300;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return std::max(best, 1e-9);
}

constexpr int kShrink = 16;  // 4096 -> 256: the whole grid in seconds on a CPU

// The host emulation's stand-in for a GPU GEMM of m x n x k: float32 on the CPU at 1/16 of each size.
struct HostGemm {
  int m, n, k;
  std::vector<float> a, b, c;
  HostGemm(int full_m, int full_n, int full_k)
      : m(std::max(1, full_m / kShrink)),
        n(std::max(1, full_n / kShrink)),
        k(std::max(1, full_k / kShrink)),
        a(static_cast<std::size_t>(m) * k, 0.5f),
        b(static_cast<std::size_t>(k) * n, 0.25f),
        c(static_cast<std::size_t>(m) * n) {}
  void run() { cpu::matmul(c.data(), a.data(), b.data(), m, n, k); }
  double flops() const { return 2.0 * m * double(n) * k; }
};

KernelTable measure_host(const KernelBenchOptions& o) {
  KernelTable t;
  t.device = "host emulation (CPU float32 GEMMs at 1/16 of each size)";
  t.emulated = true;
  t.sizes = o.sizes;
  const int reps = std::min(o.repeats, 2);
  for (int m : o.sizes)
    for (int n : o.sizes)
      for (int k : o.sizes) {
        HostGemm g(m, n, k);
        t.gemm_bf16_tflops.push_back(g.flops() / fastest_seconds(reps, [&] { g.run(); }) / 1e12);
      }
  std::vector<char> from(std::size_t{64} << 20, 1), to(from.size());
  const double s = fastest_seconds(reps, [&] { std::memcpy(to.data(), from.data(), from.size()); });
  t.hbm_bytes_per_s = 2.0 * static_cast<double>(from.size()) / s;
  // Grouped GEMMs: the experts' GEMMs one after the other, at 1/16 of each size, their time scaled
  // to the full shape at the rate reached (as the GEMM table's rates are the shrunk GEMMs').
  t.grouped_experts = o.grouped_experts;
  t.grouped_rows = o.grouped_rows;
  t.grouped_shapes = o.grouped_shapes;
  for (int experts : o.grouped_experts)
    for (int rows : o.grouped_rows)
      for (const auto& [k, n] : o.grouped_shapes) {
        HostGemm g(rows, n, k);
        const double shrunk = fastest_seconds(reps, [&] {
          for (int e = 0; e < experts; ++e) g.run();
        });
        t.grouped_seconds.push_back(shrunk * (2.0 * rows * double(k) * n) / g.flops());
      }
  // Sustained rate: back-to-back GEMMs at 1/16 of 8192 in windows of a twentieth of the time.
  if (o.sustain_seconds > 0) {
    HostGemm g(8192, 8192, 8192);
    const double flops = g.flops();
    t.sustained_size = 8192;
    // The burst: the median of single GEMMs, as on the GPU, but one before each window: a CPU has
    // no clock to fall back from, and its load from other processes then weighs on both alike.
    std::vector<double> singles;
    const auto start = std::chrono::steady_clock::now();
    const double window = o.sustain_seconds / 20;
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < o.sustain_seconds) {
      singles.push_back(fastest_seconds(0, [&] { g.run(); }));
      const auto w0 = std::chrono::steady_clock::now();
      int runs = 0;
      double elapsed = 0;
      do {
        g.run();
        ++runs;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
      } while (elapsed < window);
      t.window_tflops.push_back(runs * flops / elapsed / 1e12);
    }
    std::sort(singles.begin(), singles.end());
    t.burst_tflops = flops / singles[singles.size() / 2] / 1e12;
    t.sustained_fraction = sustained_fraction(t.window_tflops, t.burst_tflops);
  }
  // GEMMs beside held "SMs": on the host a spinning thread beside the GEMMs (one, whatever s: the
  // figures describe the CPU, not a GPU's SMs).
  if (!o.sharing_sms.empty()) {
    HostGemm g(4096, 4096, 4096);
    auto burst = [&] {
      for (int i = 0; i < 4; ++i) g.run();
    };
    double alone = 1e300;
    for (int held : o.sharing_sms) {
      alone = std::min(alone, fastest_seconds(reps, burst));
      std::atomic<bool> stop{false};
      std::thread spin([&] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
      const double beside = fastest_seconds(reps, burst);
      stop = true;
      spin.join();
      t.sharing_sms.push_back(held);
      t.sharing_speed.push_back(sharing_speed(alone, beside));
    }
  }
  // The host cost of one call: a 1 x 1 x 1 GEMM.
  HostGemm one(1, 1, 1);
  t.grouped_launch_s = fastest_seconds(reps, [&] { one.run(); });
  return t;
}

}  // namespace

double sustained_fraction(const std::vector<double>& window_tflops, double burst_tflops) {
  if (window_tflops.empty() || !(burst_tflops > 0)) return 0;
  const std::size_t last = std::max<std::size_t>(1, window_tflops.size() / 4);
  double sum = 0;
  for (std::size_t i = window_tflops.size() - last; i < window_tflops.size(); ++i) sum += window_tflops[i];
  return sum / double(last) / burst_tflops;
}

double sharing_speed(double fastest_alone_seconds, double beside_seconds) {
  return std::min(1.0, fastest_alone_seconds / beside_seconds);
}

KernelTable measure_kernel_table(const KernelBenchOptions& o) {
  if (o.sizes.empty() || !std::is_sorted(o.sizes.begin(), o.sizes.end()) || o.sizes.front() < 1)
    throw std::runtime_error("kernel table: the sizes must be ascending and positive");
  auto ascending = [](const std::vector<int>& v) {
    return !v.empty() && v.front() >= 1 && std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (!ascending(o.grouped_experts) || !ascending(o.grouped_rows) || o.grouped_shapes.empty())
    throw std::runtime_error("kernel table: the grouped-GEMM experts and rows must be ascending and positive");
  if (!o.sharing_sms.empty() && !ascending(o.sharing_sms))
    throw std::runtime_error("kernel table: the SMs held beside the GEMMs must be ascending and positive");
  return o.emulate ? measure_host(o) : cuda::measure_kernel_table_cuda(o);
}

nlohmann::json kernel_table_to_json(const KernelTable& t) {
  nlohmann::json j = {{"device", t.device},
                      {"emulated", t.emulated},
                      {"sms", t.sms},
                      {"memory_gb", t.memory_bytes / 1e9},
                      {"sizes", t.sizes},
                      {"gemm_bf16_tflops", t.gemm_bf16_tflops},
                      {"hbm_gbps", t.hbm_bytes_per_s / 1e9}};
  // The parts measured (a table read from an older file may have neither).
  if (!t.grouped_seconds.empty()) {
    j["grouped"] = {{"experts", t.grouped_experts},
                    {"rows", t.grouped_rows},
                    {"shapes", t.grouped_shapes},
                    {"seconds", t.grouped_seconds}};
    j["grouped_launch_us"] = t.grouped_launch_s * 1e6;
  }
  if (!t.sharing_sms.empty()) j["sm_sharing"] = {{"sms", t.sharing_sms}, {"speed", t.sharing_speed}};
  if (t.sustained_fraction > 0)
    j["sustained"] = {{"size", t.sustained_size},
                      {"burst_tflops", t.burst_tflops},
                      {"window_tflops", t.window_tflops},
                      {"fraction", t.sustained_fraction}};
  return j;
}

KernelTable kernel_table_from_json(const nlohmann::json& j) {
  auto fail = [](const std::string& why) { throw std::runtime_error("kernel_table: " + why); };
  if (!j.is_object()) fail("must be an object");
  KernelTable t;
  if (j.contains("device")) {
    if (!j["device"].is_string()) fail("'device' must be a string");
    t.device = j["device"].get<std::string>();
  }
  if (j.contains("emulated")) {
    if (!j["emulated"].is_boolean()) fail("'emulated' must be true or false");
    t.emulated = j["emulated"].get<bool>();
  }
  if (!j.contains("sizes") || !j["sizes"].is_array() || j["sizes"].size() < 2 || j["sizes"].size() > 16)
    fail("'sizes' must be an array of 2 to 16 ascending sizes");
  for (const auto& v : j["sizes"]) {
    if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1 << 20))
      fail("every size must be an integer in [1, 1048576]");
    t.sizes.push_back(v.get<int>());
  }
  for (std::size_t i = 1; i < t.sizes.size(); ++i)
    if (t.sizes[i] <= t.sizes[i - 1]) fail("'sizes' must be strictly ascending");
  const std::size_t n = t.sizes.size();
  if (!j.contains("gemm_bf16_tflops") || !j["gemm_bf16_tflops"].is_array() || j["gemm_bf16_tflops"].size() != n * n * n)
    fail("'gemm_bf16_tflops' must hold sizes^3 = " + std::to_string(n * n * n) + " numbers");
  for (const auto& v : j["gemm_bf16_tflops"]) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0 || v.get<double>() > 1e5)
      fail("every GEMM rate must be a number in (0, 100000] TFLOP/s");
    t.gemm_bf16_tflops.push_back(v.get<double>());
  }
  if (!j.contains("hbm_gbps") || !j["hbm_gbps"].is_number() || !(j["hbm_gbps"].get<double>() > 0) ||
      j["hbm_gbps"].get<double>() > 1e6)
    fail("'hbm_gbps' must be a number in (0, 1000000]");
  t.hbm_bytes_per_s = j["hbm_gbps"].get<double>() * 1e9;
  if (j.contains("grouped")) {
    const auto& g = j["grouped"];
    if (!g.is_object()) fail("'grouped' must be an object {experts, rows, shapes, seconds}");
    auto ascending = [&](const char* name, std::vector<int>& into) {
      if (!g.contains(name) || !g[name].is_array() || g[name].empty() || g[name].size() > 16)
        fail(std::string("'grouped.") + name + "' must be an array of 1 to 16 ascending integers");
      for (const auto& v : g[name]) {
        if (!v.is_number_integer() || v.get<long long>() < 1 || v.get<long long>() > (1 << 20) ||
            (!into.empty() && v.get<int>() <= into.back()))
          fail(std::string("'grouped.") + name + "' must be an array of 1 to 16 ascending integers");
        into.push_back(v.get<int>());
      }
    };
    ascending("experts", t.grouped_experts);
    ascending("rows", t.grouped_rows);
    if (!g.contains("shapes") || !g["shapes"].is_array() || g["shapes"].empty() || g["shapes"].size() > 16)
      fail("'grouped.shapes' must be an array of 1 to 16 [k, n] pairs");
    for (const auto& v : g["shapes"]) {
      if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
          v[0].get<long long>() < 1 || v[1].get<long long>() < 1 || v[0].get<long long>() > (1 << 20) ||
          v[1].get<long long>() > (1 << 20))
        fail("'grouped.shapes' must be an array of 1 to 16 [k, n] pairs");
      t.grouped_shapes.emplace_back(v[0].get<int>(), v[1].get<int>());
    }
    const std::size_t cells = t.grouped_experts.size() * t.grouped_rows.size() * t.grouped_shapes.size();
    if (!g.contains("seconds") || !g["seconds"].is_array() || g["seconds"].size() != cells)
      fail("'grouped.seconds' must hold experts x rows x shapes = " + std::to_string(cells) + " numbers");
    for (const auto& v : g["seconds"]) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0 || v.get<double>() > 1e3)
        fail("every grouped GEMM time must be a number in (0, 1000] seconds");
      t.grouped_seconds.push_back(v.get<double>());
    }
  }
  if (j.contains("grouped_launch_us")) {
    if (!j["grouped_launch_us"].is_number() || !(j["grouped_launch_us"].get<double>() >= 0) ||
        j["grouped_launch_us"].get<double>() > 1e6)
      fail("'grouped_launch_us' must be a number in [0, 1000000]");
    t.grouped_launch_s = j["grouped_launch_us"].get<double>() * 1e-6;
  }
  if (j.contains("sustained")) {
    const auto& u = j["sustained"];
    auto number = [&](const char* name, double max) {
      if (!u.is_object() || !u.contains(name) || !u[name].is_number() || !std::isfinite(u[name].get<double>()) ||
          u[name].get<double>() < 0 || u[name].get<double>() > max)
        fail(std::string("'sustained.") + name + "' must be a number in [0, " + std::to_string(int(max)) + "]");
      return u[name].get<double>();
    };
    t.sustained_size = static_cast<int>(number("size", 1 << 20));
    t.burst_tflops = number("burst_tflops", 1e5);
    t.sustained_fraction = number("fraction", 2);
    if (t.sustained_fraction != 0 && t.sustained_fraction < 0.3)
      fail("'sustained.fraction' must be 0 (not measured) or in [0.3, 2]");
    if (u.contains("window_tflops")) {
      if (!u["window_tflops"].is_array()) fail("'sustained.window_tflops' must be an array of TFLOP/s");
      for (const auto& v : u["window_tflops"]) {
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
          fail("'sustained.window_tflops' must be an array of TFLOP/s");
        t.window_tflops.push_back(v.get<double>());
      }
    }
  }
  if (j.contains("sm_sharing")) {
    const auto& h = j["sm_sharing"];
    if (!h.is_object() || !h.contains("sms") || !h.contains("speed") || !h["sms"].is_array() ||
        !h["speed"].is_array() || h["sms"].empty() || h["sms"].size() > 64 || h["sms"].size() != h["speed"].size())
      fail("'sm_sharing' must be {\"sms\": [ascending SMs held], \"speed\": [as many speeds in (0, 1.5]]}");
    for (std::size_t i = 0; i < h["sms"].size(); ++i) {
      const auto& sms = h["sms"][i];
      const auto& speed = h["speed"][i];
      if (!sms.is_number_integer() || sms.get<long long>() < 1 || sms.get<long long>() > 4096 ||
          (!t.sharing_sms.empty() && sms.get<int>() <= t.sharing_sms.back()) || !speed.is_number() ||
          !std::isfinite(speed.get<double>()) || speed.get<double>() <= 0 || speed.get<double>() > 1.5)
        fail("'sm_sharing' must be {\"sms\": [ascending SMs held], \"speed\": [as many speeds in (0, 1.5]]}");
      t.sharing_sms.push_back(sms.get<int>());
      t.sharing_speed.push_back(speed.get<double>());
    }
  }
  if (j.contains("sms") && j["sms"].is_number_integer()) t.sms = j["sms"].get<int>();
  if (j.contains("memory_gb") && j["memory_gb"].is_number()) t.memory_bytes = j["memory_gb"].get<double>() * 1e9;
  return t;
}

std::vector<std::string> drop_unreadable_parts(KernelTable& t) {
  struct Part {
    const char* name;
    void (*clear)(KernelTable&);
  };
  static constexpr Part parts[] = {
      {"grouped",
       [](KernelTable& x) {
         x.grouped_experts.clear();
         x.grouped_rows.clear();
         x.grouped_shapes.clear();
         x.grouped_seconds.clear();
         x.grouped_launch_s = 0;
       }},
      {"sustained",
       [](KernelTable& x) {
         x.sustained_size = 0;
         x.burst_tflops = 0;
         x.window_tflops.clear();
         x.sustained_fraction = 0;
       }},
      {"sm_sharing",
       [](KernelTable& x) {
         x.sharing_sms.clear();
         x.sharing_speed.clear();
       }},
  };
  KernelTable base = t;
  for (const Part& p : parts) p.clear(base);
  try {
    kernel_table_from_json(kernel_table_to_json(base));
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("the measured GEMM rates or bandwidth are unreadable: ") + e.what());
  }
  std::vector<std::string> dropped;
  for (const Part& p : parts) {
    KernelTable only = t;
    for (const Part& q : parts)
      if (&q != &p) q.clear(only);
    try {
      kernel_table_from_json(kernel_table_to_json(only));
    } catch (const std::runtime_error& e) {
      p.clear(t);
      dropped.push_back(std::string(p.name) + " left out: " + e.what());
    }
  }
  return dropped;
}

}  // namespace ht::engine
