// The GPU side of the kernel table (kernel_table.hpp): cuBLAS BF16 GEMMs on the grid and a
// streaming copy kernel, timed with CUDA events on one stream of GPU 0.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/kernel_table.hpp"
#include "entry_points.hpp"

namespace ht::engine::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(int(s)));
}

// Owning device allocation.
struct Device {
  void* p = nullptr;
  explicit Device(std::size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

__global__ void copy_kernel(const float4* __restrict__ from, float4* __restrict__ to, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

// Fastest of `repeats` runs of `run` after one warm-up, in seconds, by CUDA events.
template <class F>
double fastest(cudaStream_t stream, int repeats, F&& run) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  run();
  check(cudaStreamSynchronize(stream), "warm-up");
  float best = 1e30f;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    run();
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::min(best, ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return std::max(1e-9, double(best) * 1e-3);
}

}  // namespace

namespace gpu {
KernelTable measure_kernel_table_cuda(const KernelBenchOptions& o) {
  const CudaProbe probe = gpu::cuda_probe();
  if (!probe.usable) throw std::runtime_error("no usable CUDA GPU: " + probe.reason);
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  KernelTable t;
  t.device = prop.name;
  t.sms = prop.multiProcessorCount;
  t.memory_bytes = double(prop.totalGlobalMem);
  t.sizes = o.sizes;
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cublasHandle_t blas;
  check(cublasCreate(&blas), "cublasCreate");
  check(cublasSetStream(blas, stream), "cublasSetStream");
  const std::size_t largest = static_cast<std::size_t>(o.sizes.back());
  Device a(largest * largest * sizeof(__nv_bfloat16)), b(largest * largest * sizeof(__nv_bfloat16)),
      c(largest * largest * sizeof(__nv_bfloat16));
  check(cudaMemset(a.p, 0, largest * largest * sizeof(__nv_bfloat16)), "cudaMemset");
  check(cudaMemset(b.p, 0, largest * largest * sizeof(__nv_bfloat16)), "cudaMemset");
  const float alpha = 1, beta = 0;
  for (int m : o.sizes)
    for (int n : o.sizes)
      for (int k : o.sizes) {
        // Row-major C (m x n) = A (m x k) B (k x n), as cuBLAS' column-major C^T = B^T A^T.
        const double s = fastest(stream, o.repeats, [&] {
          check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, b.p, CUDA_R_16BF, n, a.p, CUDA_R_16BF, k,
                             &beta, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx (bf16)");
        });
        t.gemm_bf16_tflops.push_back(2.0 * m * double(n) * k / s / 1e12);
      }
  // Streaming copy over 2 x 1 GiB, far beyond L2: bytes read plus bytes written per second.
  const std::size_t bytes = std::size_t{1} << 30;
  Device from(bytes), to(bytes);
  check(cudaMemset(from.p, 0, bytes), "cudaMemset");
  const std::size_t n4 = bytes / sizeof(float4);
  const double s = fastest(stream, o.repeats, [&] {
    copy_kernel<<<prop.multiProcessorCount * 8, 256, 0, stream>>>(static_cast<const float4*>(from.p),
                                                                    static_cast<float4*>(to.p), n4);
    check(cudaGetLastError(), "copy kernel");
  });
  t.hbm_bytes_per_s = 2.0 * double(bytes) / s;
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return t;
}

}  // namespace gpu
}  // namespace ht::engine::cuda
