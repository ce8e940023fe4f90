// The CUDA entry points of a build without the CUDA backend (nvcc was not found, or
// HT_ENABLE_CUDA=OFF): the probe says why, and nothing pretends to run on a GPU.
#include <stdexcept>

#include "ht/engine/cuda/compare.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/device_model.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/kernel_table.hpp"

namespace ht::engine {

CudaProbe cuda_probe() {
  return CudaProbe{false, "this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)", ""};
}

namespace cuda {
std::vector<OpComparison> compare_cpu_vs_cuda(std::uint64_t, const CompareShape&) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::vector<LayerComparison> compare_layers_cuda(std::uint64_t, const LayerShape&) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
KernelTable measure_kernel_table_cuda(const KernelBenchOptions&) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
double measure_gemm_tflops_cuda(int, int) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::unique_ptr<DataParallelModel> make_cuda_data_parallel(const patterns::ParsedPattern&, const ModelConfig&,
                                                           std::uint64_t, int) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::unique_ptr<DeviceExecutor> make_cuda_executor(const patterns::ParsedPattern&, const ModelConfig&, std::uint64_t,
                                                   schedule::Plan, DeviceExecutorOptions) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::unique_ptr<ProcessGroup> make_nccl_group() {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::unique_ptr<ThreadFabric> make_nccl_fabric(int) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
std::unique_ptr<DeviceModel> make_cuda_device_model(HybridModel<float>&) {
  throw std::runtime_error("this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)");
}
}  // namespace cuda

}  // namespace ht::engine
