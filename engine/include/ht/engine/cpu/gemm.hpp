// Matrix products of the CPU reference backend: every linear map of every layer goes through
// matmul(), so the one place that decides reduction order (Eigen's single-threaded blocked GEMM,
// fixed for fixed shapes) is here. A CUDA backend provides the same entry points over cuBLAS.
//
// Convention (row-major, contiguous, PyTorch weight layout):
//   out (m, n)  =  op(a) (m, k)  @  op(b) (k, n)      (+= when accumulate)
//   a is stored (m, k), or (k, m) when trans_a;  b is stored (k, n), or (n, k) when trans_b.
// A linear layer y = x W^T with W (OC, C):  matmul(y, x, W, N, OC, C, false, true)
//   dx += dy W:                             matmul(dx, dy, W, N, C, OC, false, false, true)
//   dW += dy^T x:                           matmul(dW, dy, x, OC, C, N, true, false, true)
#pragma once

#include <string>

#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine::cpu {

// Which GEMM kernels this build uses (HT_EIGEN_BLAS): printed by benchmarks.
std::string gemm_kernels();

// Instantiated for float and double (engine/src/cpu/gemm.cpp).
template <class T>
void matmul(T* out, const T* a, const T* b, int m, int n, int k, bool trans_a = false,
            bool trans_b = false, bool accumulate = false);

// y (N, OC) = x (N, C) W^T (+ bias (OC)); leading dims of x are flattened into N.
template <class T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int n, int c, int oc);
// Backward of linear_forward; every output accumulates (+=). Any of dx, dweight, dbias may be
// nullptr when that gradient is not wanted. With `defer_weight` the weight gradient is not
// computed here but handed to the sink (layers/wgrad.hpp), which runs the same GEMM later.
template <class T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight, int n,
                     int c, int oc, WgradSink<T>* defer_weight = nullptr);

// 2 m n k summed over every matmul the calling thread has run: a counter (not a clock) that
// tests and benchmarks read around a piece of work to see how much GEMM work it did.
double gemm_flops();

}  // namespace ht::engine::cpu
