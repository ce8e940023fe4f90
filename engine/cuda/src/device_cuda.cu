// The GPU device (dev::Cuda): the CUDA layers against the CPU reference (compare_layers_cuda), the
// device executor on the GPU (make_cuda_executor) and the GPU's GEMM rate.
#include <memory>
#include <stdexcept>
#include <string>

#include "dev_cuda.cuh"
#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/dev/executor.hpp"
#include "ht/engine/cuda/dev/model.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "entry_points.hpp"

namespace ht::engine::cuda {
namespace {

std::string usable_gpu_or_throw() {
  const CudaProbe probe = gpu::cuda_probe();
  if (!probe.usable) throw std::runtime_error("no usable CUDA GPU: " + probe.reason);
  return probe.device_name;
}

}  // namespace

namespace gpu {

std::vector<LayerComparison> compare_layers_cuda(std::uint64_t seed, const LayerShape& shape) {
  usable_gpu_or_throw();
  return ::ht::engine::dev::compare::compare_layers<::ht::engine::dev::Cuda, float>(seed, shape);
}

std::unique_ptr<DeviceExecutor> make_cuda_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan, DeviceExecutorOptions options) {
  const std::string name = usable_gpu_or_throw();
  if (options.group && options.group->name() != "nccl")
    throw std::runtime_error("the GPU's ranks exchange device memory over NCCL, not " + options.group->name());
  const int ranks = plan.global_ranks() / (options.group ? options.group->processes() : 1);
  return std::make_unique<::ht::engine::dev::ExecutorOn<::ht::engine::dev::Cuda>>(
      p, cfg, seed, std::move(plan), options,
      "cuda:" + name + " (" + std::to_string(ranks) + " ranks sharing it)" + process_note(options));
}

double measure_gemm_tflops_cuda(int n, int reps) {
  usable_gpu_or_throw();
  return ::ht::engine::dev::measure_gemm_tflops<::ht::engine::dev::Cuda>(n, reps);
}

}  // namespace gpu
}  // namespace ht::engine::cuda
