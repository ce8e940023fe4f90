// Turns CUDA runtime and cuBLAS status codes into std::runtime_error with the call site, so a
// failure on a GPU machine reads as one actionable line (CUDA sources of engine/cuda only).
#pragma once

#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace ht::engine::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

}  // namespace ht::engine::cuda
