// The backend interface: the primitive operations the layers are built from, so that a CUDA
// backend (engine/cuda/, cuBLAS + kernels calling math.hpp) can stand in for the CPU reference
// operation by operation and be compared against it. Every operation states its reduction order;
// a backend must reproduce it (or document where it differs) to keep runs bitwise repeatable.
// Float32 only: the float64 finite-difference path runs the templated CPU code directly.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ht::engine {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // out (m, n) (+)= op(a) (m, k) op(b) (k, n); row-major, layout as cpu::matmul (gemm.hpp).
  virtual void matmul(float* out, const float* a, const float* b, int m, int n, int k, bool trans_a,
                      bool trans_b, bool accumulate) = 0;
  // Elementwise y = silu(x) and y = x + z (n values).
  virtual void silu(float* y, const float* x, std::size_t n) = 0;
  virtual void add(float* y, const float* x, const float* z, std::size_t n) = 0;
  // Sum of n values, left to right, accumulated in double.
  virtual double sum(const float* x, std::size_t n) = 0;
  // Row-wise softmax of (rows, n): max, exp-sum, scale, each left to right (math::softmax_row).
  virtual void softmax_rows(float* out, const float* in, int rows, int n) = 0;
  // Inclusive prefix sum along each row of (rows, n), left to right.
  virtual void cumsum_rows(float* out, const float* in, int rows, int n) = 0;
  // out[i] = in[index[i]] for rows of c values.
  virtual void gather_rows(float* out, const float* in, const int* index, int rows, int c) = 0;
  // out[index[i]] += in[i] for i = 0 .. rows-1 in increasing i (fixed accumulation order).
  virtual void scatter_add_rows(float* out, const float* in, const int* index, int rows, int c) = 0;
  // Per row of (rows, n): indices of the k largest values, descending; equal values order by
  // lower index first (the MoE router's tie-break).
  virtual void topk_rows(int* idx, const float* in, int rows, int n, int k) = 0;
};

// The plain single-threaded reference backend (engine/src/cpu/backend.cpp).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace ht::engine
