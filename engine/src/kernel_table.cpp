// Kernel tables (see kernel_table.hpp): the JSON form and the host emulation; the GPU side is in
// engine/cuda/src/kernel_bench.cu.
#include "ht/engine/kernel_table.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

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

KernelTable measure_host(const KernelBenchOptions& o) {
  constexpr int kShrink = 16;  // 4096 -> 256: the whole grid in seconds on a CPU
  KernelTable t;
  t.device = "host emulation (CPU float32 GEMMs at 1/16 of each size)";
  t.emulated = true;
  t.sizes = o.sizes;
  const int reps = std::min(o.repeats, 2);
  for (int m : o.sizes)
    for (int n : o.sizes)
      for (int k : o.sizes) {
        const int sm = std::max(1, m / kShrink), sn = std::max(1, n / kShrink), sk = std::max(1, k / kShrink);
        std::vector<float> a(static_cast<std::size_t>(sm) * sk, 0.5f), b(static_cast<std::size_t>(sk) * sn, 0.25f),
            c(static_cast<std::size_t>(sm) * sn);
        const double s = fastest_seconds(reps, [&] { cpu::matmul(c.data(), a.data(), b.data(), sm, sn, sk); });
        t.gemm_bf16_tflops.push_back(2.0 * sm * sn * sk / s / 1e12);
      }
  std::vector<char> from(std::size_t{64} << 20, 1), to(from.size());
  const double s = fastest_seconds(reps, [&] { std::memcpy(to.data(), from.data(), from.size()); });
  t.hbm_bytes_per_s = 2.0 * static_cast<double>(from.size()) / s;
  return t;
}

}  // namespace

KernelTable measure_kernel_table(const KernelBenchOptions& o) {
  if (o.sizes.empty() || !std::is_sorted(o.sizes.begin(), o.sizes.end()) || o.sizes.front() < 1)
    throw std::runtime_error("kernel table: the sizes must be ascending and positive");
  return o.emulate ? measure_host(o) : cuda::measure_kernel_table_cuda(o);
}

nlohmann::json kernel_table_to_json(const KernelTable& t) {
  return {{"device", t.device},
          {"emulated", t.emulated},
          {"sms", t.sms},
          {"memory_gb", t.memory_bytes / 1e9},
          {"sizes", t.sizes},
          {"gemm_bf16_tflops", t.gemm_bf16_tflops},
          {"hbm_gbps", t.hbm_bytes_per_s / 1e9}};
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
  if (j.contains("sms") && j["sms"].is_number_integer()) t.sms = j["sms"].get<int>();
  if (j.contains("memory_gb") && j["memory_gb"].is_number()) t.memory_bytes = j["memory_gb"].get<double>() * 1e9;
  return t;
}

}  // namespace ht::engine
