// Row-major GEMM on cuBLAS in the layout of cpu::matmul (gemm.hpp), used by the CUDA layers'
// device policy (dev_cuda.cuh). FP32 runs with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32, no
// reduced-precision reductions); float64 runs cublasDgemm. One handle on one stream: the setting
// under which cuBLAS results repeat bit for bit run to run on one GPU model.
//
// Row-major out (m, n) = op(a) op(b) is column-major out^T (n, m) = op(b)^T op(a)^T, so cuBLAS
// gets b first; a row-major matrix read as column-major is its transpose.
#pragma once

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.hpp"

namespace ht::engine::cuda {

template <class T>
inline void gemm_rowmajor(cublasHandle_t blas, cudaStream_t stream, T* out, const T* a, const T* b, int m, int n,
                          int k, bool trans_a, bool trans_b, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate) check(cudaMemsetAsync(out, 0, sizeof(T) * static_cast<std::size_t>(m) * n, stream), "cudaMemsetAsync");
    return;
  }
  const T alpha = T(1), beta = accumulate ? T(1) : T(0);
  const int ldb = trans_b ? k : n, lda = trans_a ? m : k;
  const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, oa = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if constexpr (sizeof(T) == sizeof(float)) {
    check(cublasGemmEx(blas, ob, oa, n, m, k, &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda, &beta, out, CUDA_R_32F, n,
                       CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  } else {
    check(cublasDgemm(blas, ob, oa, n, m, k, &alpha, b, ldb, a, lda, &beta, out, n), "cublasDgemm");
  }
}

}  // namespace ht::engine::cuda
