// What the device's checks share, without CUDA headers: the small model every layer type of which
// they run, the rows they report (`verify --backend cuda|cuda-host`, scripts/gpu-check), and the
// device's own GEMM rate that a measured rate is held against.
#pragma once

#include <string>

#include "ht/engine/config.hpp"

namespace ht::engine::cuda {

// The device's FP32 GEMM rate (pedantic, no TF32) on an n x n x n product, best of `reps`, in
// TFLOP/s: what a model's achieved rate is measured against.
double measure_gemm_tflops_host(int n, int reps);
double measure_gemm_tflops_cuda(int n, int reps);  // throws without a usable GPU

// One row of a device check: which pair was compared, on which pattern(s), the largest difference,
// whether every bit agreed, whether the row passes, and a note with the bound it was held to.
struct ModelComparison {
  std::string pair;
  std::string config;
  double max_abs_diff = 0;
  bool bitwise = false;
  bool pass = false;
  std::string note;
};

// The small model the checks run (and the device tests): GQA 2:1, a window, top-2 of 4 experts
// with a shared expert, Mamba2 with 2 groups, GDN with 2 value heads per q/k head, MLA with
// low-rank q.
ModelConfig model_check_config();

}  // namespace ht::engine::cuda
