// The CUDA implementation of the Backend interface (engine/include/ht/engine/backend.hpp),
// mirroring the CPU reference (engine/src/cpu/backend.cpp) operation by operation.
//
// Numerics. matmul is cuBLAS with TF32 off (pedantic FP32 compute) and one stream, the setting
// under which cuBLAS documents bitwise-repeatable results run to run on one GPU model; it sums in
// another order than Eigen, so CPU vs CUDA agree within k u sum|a||b| only (compare.cpp). Every
// other operation is a kernel in which one thread owns one row (or one element) and calls the
// same HT_HD function the CPU runs (math.hpp, cpu/ops.hpp), so the reduction order is the CPU's.
// This file is compiled with --fmad=false (engine/cuda/CMakeLists.txt) because g++ does not
// contract a*b+c either; add, cumsum, gather, scatter-add, top-k and sum are then bitwise equal
// to the CPU. silu and softmax call exp(), whose CUDA version (expf, at most 2 ulp) is not glibc's,
// so those two agree within a stated bound instead (compare.cpp).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.hpp"
#include "gemm.cuh"
#include "ht/engine/cpu/ops.hpp"
#include "ht/engine/cuda/backend.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::cuda {
namespace {

constexpr int kThreads = 128;

int blocks_for(long long work) { return static_cast<int>((work + kThreads - 1) / kThreads); }

__global__ void silu_kernel(float* y, const float* x, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = math::silu(x[i]);
}

__global__ void add_kernel(float* y, const float* x, const float* z, std::size_t n) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + z[i];
}

// One thread, left to right in double: the CPU's order. Any parallel split would reassociate the
// double sum and change its last bits, so this kernel trades speed for the reference's result.
__global__ void sum_kernel(double* out, const float* x, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += x[i];
  *out = s;
}

__global__ void softmax_rows_kernel(float* out, const float* in, int rows, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) math::softmax_row(out + static_cast<std::ptrdiff_t>(r) * n, in + static_cast<std::ptrdiff_t>(r) * n, n);
}

__global__ void cumsum_rows_kernel(float* out, const float* in, int rows, int n) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) cpu::cumsum_row(out + static_cast<std::ptrdiff_t>(r) * n, in + static_cast<std::ptrdiff_t>(r) * n, n);
}

// Thread i copies its own row: cpu::gather_rows on a one-row slice.
__global__ void gather_rows_kernel(float* out, const float* in, const int* index, int rows, int c) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows) cpu::gather_rows(out + static_cast<std::ptrdiff_t>(i) * c, in, index + i, 1, c);
}

// The CPU adds source rows into out in increasing i. Here the thread of the first source row of
// each destination adds every source row with that destination, in increasing i, and the other
// threads return: each destination row sees the CPU's order, and no two threads write one row.
__global__ void scatter_add_rows_kernel(float* out, const float* in, const int* index, int rows, int c) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const int dest = index[i];
  for (int j = 0; j < i; ++j)
    if (index[j] == dest) return;
  const int zero = 0;
  for (int j = i; j < rows; ++j)
    if (index[j] == dest)
      cpu::scatter_add_rows(out + static_cast<std::ptrdiff_t>(dest) * c, in + static_cast<std::ptrdiff_t>(j) * c,
                            &zero, 1, c);
}

__global__ void topk_rows_kernel(int* idx, const float* in, int rows, int n, int k) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) cpu::topk_row(idx + static_cast<std::ptrdiff_t>(r) * k, in + static_cast<std::ptrdiff_t>(r) * n, n, k);
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasCreate(&blas_), "cublasCreate");
    check(cublasSetStream(blas_, stream_), "cublasSetStream");
    // No TF32, no reduced-precision reductions: FP32 products and sums only.
    check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    // A workspace owned by this backend, so cuBLAS never picks a kernel by what it can allocate.
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc(workspace)");
    check(cublasSetWorkspace(blas_, workspace_, kWorkspaceBytes), "cublasSetWorkspace");
    check(cudaMalloc(reinterpret_cast<void**>(&sum_), sizeof(double)), "cudaMalloc(sum)");
  }
  ~CudaBackend() override {
    cudaFree(sum_);
    cublasDestroy(blas_);
    cudaFree(workspace_);
    cudaStreamDestroy(stream_);
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }

  void matmul(float* out, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b,
              bool accumulate) override {
    gemm_rowmajor<float>(blas_, stream_, out, a, b, m, n, k, trans_a, trans_b, accumulate);
    finish("matmul");
  }
  void silu(float* y, const float* x, std::size_t n) override {
    if (n == 0) return;
    silu_kernel<<<blocks_for(static_cast<long long>(n)), kThreads, 0, stream_>>>(y, x, n);
    finish("silu");
  }
  void add(float* y, const float* x, const float* z, std::size_t n) override {
    if (n == 0) return;
    add_kernel<<<blocks_for(static_cast<long long>(n)), kThreads, 0, stream_>>>(y, x, z, n);
    finish("add");
  }
  double sum(const float* x, std::size_t n) override {
    sum_kernel<<<1, 1, 0, stream_>>>(sum_, x, n);
    finish("sum");
    double s = 0;
    check(cudaMemcpy(&s, sum_, sizeof s, cudaMemcpyDeviceToHost), "cudaMemcpy(sum)");
    return s;
  }
  void softmax_rows(float* out, const float* in, int rows, int n) override {
    if (rows <= 0 || n <= 0) return;
    softmax_rows_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(out, in, rows, n);
    finish("softmax_rows");
  }
  void cumsum_rows(float* out, const float* in, int rows, int n) override {
    if (rows <= 0 || n <= 0) return;
    cumsum_rows_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(out, in, rows, n);
    finish("cumsum_rows");
  }
  void gather_rows(float* out, const float* in, const int* index, int rows, int c) override {
    if (rows <= 0 || c <= 0) return;
    gather_rows_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(out, in, index, rows, c);
    finish("gather_rows");
  }
  void scatter_add_rows(float* out, const float* in, const int* index, int rows, int c) override {
    if (rows <= 0 || c <= 0) return;
    scatter_add_rows_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(out, in, index, rows, c);
    finish("scatter_add_rows");
  }
  void topk_rows(int* idx, const float* in, int rows, int n, int k) override {
    if (rows <= 0 || k <= 0) return;
    topk_rows_kernel<<<blocks_for(rows), kThreads, 0, stream_>>>(idx, in, rows, n, k);
    finish("topk_rows");
  }

 private:
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

  // Synchronous by contract (backend.hpp): launch errors and faults surface at the operation.
  void finish(const char* op) {
    check(cudaGetLastError(), op);
    check(cudaStreamSynchronize(stream_), op);
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* workspace_ = nullptr;
  double* sum_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}
DeviceBuffer::~DeviceBuffer() { cudaFree(ptr_); }
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  if (bytes > bytes_) throw std::runtime_error("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into " + std::to_string(bytes_));
  // A pageable cudaMemcpy may return before the data reached the device, and it runs on the legacy
  // stream, which the backend's non-blocking stream does not wait for: wait here.
  if (bytes > 0) {
    check(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy(upload)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(upload)");
  }
}
void DeviceBuffer::download(void* host, std::size_t bytes) const {
  if (bytes > bytes_) throw std::runtime_error("DeviceBuffer::download: " + std::to_string(bytes) + " bytes from " + std::to_string(bytes_));
  if (bytes > 0) check(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy(download)");
}

}  // namespace ht::engine::cuda
