// compare_layers_host: the CUDA layers (dev/*.hpp) run on the host emulation (dev::Host) against
// the CPU reference. Built on every machine, so the GPU's layer code is tested without a GPU.
#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/layer_compare.hpp"

namespace ht::engine::cuda {

std::vector<LayerComparison> compare_layers_host(std::uint64_t seed, const LayerShape& shape, bool float64) {
  return float64 ? ::ht::engine::dev::compare::compare_layers<dev::Host, double>(seed, shape)
                 : ::ht::engine::dev::compare::compare_layers<dev::Host, float>(seed, shape);
}

}  // namespace ht::engine::cuda
