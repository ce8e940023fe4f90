// The host emulation of the device (dev::Host): the CUDA layers and the device executor run on the
// CPU. Built on every machine, so the GPU's layer and model code is tested without a GPU.
#include <memory>
#include <stdexcept>
#include <string>

#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/dev/executor.hpp"
#include "ht/engine/cuda/dev/model.hpp"
#include "ht/engine/cuda/layer_compare.hpp"

namespace ht::engine::cuda {

std::vector<LayerComparison> compare_layers_host(std::uint64_t seed, const LayerShape& shape, bool float64) {
  return float64 ? ::ht::engine::dev::compare::compare_layers<::ht::engine::dev::Host, double>(seed, shape)
                 : ::ht::engine::dev::compare::compare_layers<::ht::engine::dev::Host, float>(seed, shape);
}

std::unique_ptr<DeviceExecutor> make_host_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan, DeviceExecutorOptions options) {
  if (options.group && options.group->name() != "mpi" && options.group->name() != "threads")
    throw std::runtime_error("the host emulation's ranks exchange host memory (MPI or threads), not over " +
                             options.group->name());
  return std::make_unique<::ht::engine::dev::ExecutorOn<::ht::engine::dev::Host>>(
      p, cfg, seed, std::move(plan), options, "host emulation" + process_note(options));
}

double measure_gemm_tflops_host(int n, int reps) { return ::ht::engine::dev::measure_gemm_tflops<::ht::engine::dev::Host>(n, reps); }

}  // namespace ht::engine::cuda
