// CPU vs CUDA, operation by operation: runs every Backend operation on the CPU reference and on
// the CUDA backend with the same random inputs and reports the largest difference against the
// bound stated per operation. Used by `hybrid-twin verify --backend cuda` and tests/cuda.
// Plain C++; reached through the CUDA library the engine opens on first use
// (engine/cuda/src/backends.cpp), which throws one line saying why when it cannot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ht::engine::cuda {

struct OpComparison {
  std::string op;             // Backend operation name: matmul, silu, add, ...
  double max_abs_diff = 0;    // largest |cpu - cuda| over the outputs
  bool bitwise = false;       // outputs identical bit for bit
  bool pass = false;          // bitwise, or every element within the stated bound
  std::string note;           // the bound that was applied
};

struct CompareShape {
  int rows = 37, cols = 53;   // row ops: (rows, cols); elementwise ops: rows * cols values
  int m = 65, n = 47, k = 129;  // matmul
  int topk = 4;
};

// Needs a usable GPU (cuda_probe().usable); throws std::runtime_error otherwise.
std::vector<OpComparison> compare_cpu_vs_cuda(std::uint64_t seed, const CompareShape& shape = {});

}  // namespace ht::engine::cuda
