// The CUDA backend on a GPU against the CPU reference (label `gpu`): every device layer quantity
// within its stated bound (layer_compare.hpp), the layer runs repeat bit for bit, and whole models
// on one rank of the device executor (grouped vs flattened bitwise, device vs CPU within the
// bound). The same code passes on the host emulation in the CPU suite; this is its GPU run. Without
// a usable GPU the binary prints why and exits 77 before any case runs, and ctest reports it
// SKIPPED (SKIP_RETURN_CODE), never passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda_probe.hpp"

namespace cu = ht::engine::cuda;

namespace {
constexpr int kSkip = 77;
}  // namespace

TEST_CASE("every CUDA layer quantity agrees with the CPU within its bound", "[cuda]") {
  const auto rows = cu::compare_layers_cuda(7, {});
  REQUIRE(rows.size() > 40);
  for (const auto& r : rows) {
    INFO(r.layer << " " << r.quantity << ": err " << r.err_dev << " bound " << r.bound << " (CPU " << r.err_ref << ")");
    CHECK(r.pass);
  }
}

TEST_CASE("the CUDA layers repeat bit for bit run to run", "[cuda]") {
  const auto a = cu::compare_layers_cuda(11, {}), b = cu::compare_layers_cuda(11, {});
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].layer << " " << a[i].quantity);
    CHECK(a[i].err_dev == b[i].err_dev);
    CHECK(a[i].diff_cpu == b[i].diff_cpu);
  }
}

TEST_CASE("whole models on one GPU rank: grouped == flattened bitwise, the CPU within the bound", "[cuda]") {
  for (const auto& r : cu::compare_models(cu::make_cuda_executor, 7)) {
    INFO(r.pair << " " << r.config << ": " << r.note);
    CHECK(r.pass);
    if (r.pair == "device_grouped_vs_flattened") CHECK(r.bitwise);
  }
}

int main(int argc, char* argv[]) {
  const auto probe = ht::engine::cuda_probe();
  if (!probe.usable) {
    std::cout << "SKIPPED: no usable CUDA GPU: " << probe.reason << "\n";
    return kSkip;
  }
  std::cout << "CUDA device 0: " << probe.device_name << "\n";
  return Catch::Session().run(argc, argv);
}
