// `hybrid-twin verify --backend cuda`: runs engine::cuda::compare_cpu_vs_cuda (every Backend
// operation on the CPU reference and on the GPU, same inputs) and prints its rows in the format
// of the CPU verify rows: pair `cpu_vs_cuda`, config = operation, max_abs_diff, bitwise, verdict,
// and the applied bound as the note.
#include "cuda_rows.hpp"

#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "ht/engine/cuda/compare.hpp"
#include "ht/engine/cuda_probe.hpp"

namespace ht::cli {

bool cuda_usable_or_say_why() {
  const auto probe = engine::cuda_probe();
  if (!probe.usable) std::cerr << "hybrid-twin: no usable CUDA GPU: " << probe.reason << "\n";
  return probe.usable;
}

int verify_cpu_vs_cuda(bool json_out) {
  if (!cuda_usable_or_say_why()) return 2;
  std::cerr << "verify: cpu_vs_cuda on " << engine::cuda_probe().device_name << "\n";
  const auto rows = engine::cuda::compare_cpu_vs_cuda(42);
  bool failed = false;
  for (const auto& r : rows) failed |= !r.pass;
  if (json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows)
      j.push_back({{"pair", "cpu_vs_cuda"}, {"config", r.op}, {"max_abs_diff", r.max_abs_diff}, {"bitwise", r.bitwise},
                   {"verdict", r.pass ? "pass" : "fail"}, {"note", r.note}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << std::left << std::setw(24) << "pair" << std::setw(20) << "config" << std::setw(14) << "max_abs_diff"
              << std::setw(9) << "bitwise" << std::setw(9) << "verdict" << "note\n";
    for (const auto& r : rows)
      std::cout << std::setw(24) << "cpu_vs_cuda" << std::setw(20) << r.op << std::setw(14) << std::setprecision(3)
                << r.max_abs_diff << std::setw(9) << (r.bitwise ? "yes" : "no") << std::setw(9)
                << (r.pass ? "pass" : "fail") << r.note << "\n";
  }
  return failed ? 1 : 0;
}

}  // namespace ht::cli
