// compare_layers_cuda: the CUDA layers (dev/*.hpp) on the GPU (dev::Cuda) against the CPU
// reference, with the bound stated in layer_compare.hpp.
#include <stdexcept>
#include <string>

#include "dev_cuda.cuh"
#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda_probe.hpp"

namespace ht::engine::cuda {

std::vector<LayerComparison> compare_layers_cuda(std::uint64_t seed, const LayerShape& shape) {
  const CudaProbe probe = cuda_probe();
  if (!probe.usable) throw std::runtime_error("no usable CUDA GPU: " + probe.reason);
  return ::ht::engine::dev::compare::compare_layers<::ht::engine::dev::Cuda, float>(seed, shape);
}

}  // namespace ht::engine::cuda
