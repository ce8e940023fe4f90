// Every CUDA layer (dev/*.hpp) against the CPU reference layers, forward and backward, each
// quantity (output, input gradient, every weight gradient, losses) checked against a float64 run
// of the CPU reference on the same float32-rounded inputs and weights. Plain C++: the host
// emulation is built everywhere, the CUDA run only with the CUDA backend.
//
// The bound (per quantity). err_ref = max |CPU float32 - float64|, err_dev = max |layer under test
// - float64|, scale = max |float64|, K = the quantity's summation depth (the sum of the reduction
// lengths along its longest chain: GEMM inner sizes, row sums, the tokens a weight gradient adds).
// Both float32 runs evaluate the same expressions in other summation orders (and, on the GPU, with
// CUDA's expf/logf, within 2 ulp of glibc's); a first-order error bound for either is
// gamma_K-sized, so the layer under test must satisfy
//     err_dev <= 4 err_ref + 2 K u scale,      u = 2^-24.
// A wrong index, a missed accumulation or a wrong formula gives errors of the order of `scale`,
// orders above it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"

namespace ht::engine::cuda {

struct LayerShape {
  int batch = 2;
  int seq = 24;  // > the default window (16), so 'W' masks
  ModelConfig cfg;
};

struct LayerComparison {
  std::string layer;     // rmsnorm, embedding, output+ce, mlp, attention, attention_window, moe
  std::string quantity;  // out, dinp, d<weight>, loss, aux_loss, z_loss
  int depth = 0;         // K
  double err_ref = 0, err_dev = 0, scale = 0, bound = 0;
  double diff_cpu = 0;   // max |layer under test - CPU float32|: 0 where the two agree bit for bit
  bool pass = false;
};

// The CUDA layers run on the host emulation (dev::Host); float64 = true runs them in double, where
// err_dev must be at float64 rounding (the tests use this to check the layer code itself tightly).
std::vector<LayerComparison> compare_layers_host(std::uint64_t seed, const LayerShape& shape, bool float64 = false);
// The same on the GPU (float32). Throws std::runtime_error without a usable GPU or CUDA backend.
std::vector<LayerComparison> compare_layers_cuda(std::uint64_t seed, const LayerShape& shape);

}  // namespace ht::engine::cuda
