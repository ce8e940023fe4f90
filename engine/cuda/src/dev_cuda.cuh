// The CUDA device policy of the CUDA layers (dev/*.hpp; the host emulation is dev/host.hpp): device
// memory, cuBLAS GEMMs and one kernel per launch, on the current stream of one context (stream 0
// unless the device executor selects others), so every operation is ordered after the previous
// one of its stream. upload/download return when the copy is done.
// nvcc only (compiled with --extended-lambda for the layers' `[=] HT_HD (long i)` lambdas).
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "check.hpp"
#include "gemm.cuh"

namespace ht::engine::dev {

template <class F>
__global__ void launch_kernel(long n, F f) {
  const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}

// Sum of squares in float64 in a fixed tree: kSumBlocks blocks of kSumThreads threads, each
// thread a strided run, each block a shared-memory halving, then one thread adds the block sums in
// order. The same n gives the same bits every run (not the CPU's left-to-right order).
constexpr int kSumBlocks = 256, kSumThreads = 256;
template <class T>
__global__ void sumsq_blocks(double* partial, const T* x, std::size_t n) {
  __shared__ double s[kSumThreads];
  double acc = 0;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kSumThreads + threadIdx.x; i < n;
       i += static_cast<std::size_t>(kSumBlocks) * kSumThreads)
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kSumThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}
__global__ inline void sum_partials(double* out, const double* partial, double acc) {
  for (int b = 0; b < kSumBlocks; ++b) acc += partial[b];
  *out = acc;
}

// Streams, each with its own cuBLAS handle (pedantic FP32) and workspace, and a block cache per
// stream: created on first use, kept for the thread's life (the driver tears them down at exit). Stream
// 0 is the default for everything; the device executor (dev/executor.hpp) selects one per rank
// and one for the ranks' exchanges with Cuda::set_stream and orders them with events.
//
// The cache keeps freed blocks by size and hands them out again instead of cudaMalloc/cudaFree:
// cudaFree waits for the whole device, which would serialise every layer's scratch buffers with
// the host. A block goes back to the free list of the stream that is current when it is released,
// with an event recorded there. That stream takes it again at once: work queued there before the
// release finishes before work queued after it. Another stream takes it only once the event has
// completed, without waiting for it (the device executor's all-to-all buffers are allocated on the
// comm stream and released on a rank's compute stream). A buffer used on several streams is
// released only after those streams were ordered by events, so the event covers every use.
struct CudaStream {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  struct FreeBlock {
    void* p;
    cudaEvent_t freed;  // recorded on this stream at the release
  };
  std::multimap<std::size_t, FreeBlock> free_blocks;  // rounded size -> block
};

struct CudaContext {
  std::vector<CudaStream> streams;
  int current = 0;
  std::vector<cudaEvent_t> free_events;
  std::map<void*, std::size_t> block_size;
  double gemm_flops = 0;  // 2 m n k of every GEMM issued (benchmarks read it)
  static constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

  static std::size_t rounded(std::size_t bytes) {
    const std::size_t q = bytes < (std::size_t{1} << 20) ? 512 : (std::size_t{1} << 20);
    return (bytes + q - 1) / q * q;
  }
  CudaStream& at(int id) {
    while (static_cast<int>(streams.size()) <= id) {
      CudaStream s;
      cuda::check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      cuda::check(cublasCreate(&s.blas), "cublasCreate");
      cuda::check(cublasSetStream(s.blas, s.stream), "cublasSetStream");
      cuda::check(cublasSetMathMode(s.blas, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
      cuda::check(cudaMalloc(&s.workspace, kWorkspaceBytes), "cudaMalloc(workspace)");
      cuda::check(cublasSetWorkspace(s.blas, s.workspace, kWorkspaceBytes), "cublasSetWorkspace");
      streams.push_back(s);
    }
    return streams[static_cast<std::size_t>(id)];
  }
  CudaStream& cur() { return at(current); }
  cudaStream_t stream() { return cur().stream; }
  void* take(std::size_t bytes) {
    const std::size_t r = rounded(bytes);
    CudaStream& here = cur();
    const auto reuse = [&](CudaStream& s, std::multimap<std::size_t, CudaStream::FreeBlock>::iterator it) {
      void* p = it->second.p;
      free_events.push_back(it->second.freed);
      s.free_blocks.erase(it);
      return p;
    };
    if (const auto it = here.free_blocks.find(r); it != here.free_blocks.end()) return reuse(here, it);
    for (auto& s : streams) {
      if (&s == &here) continue;
      const auto [lo, hi] = s.free_blocks.equal_range(r);
      for (auto it = lo; it != hi; ++it) {
        const cudaError_t done = cudaEventQuery(it->second.freed);
        if (done == cudaErrorNotReady) {
          cudaGetLastError();  // not an error: clear it, as the caller checks the last error
          continue;
        }
        cuda::check(done, "cudaEventQuery");
        return reuse(s, it);
      }
    }
    void* p = nullptr;
    if (cudaMalloc(&p, r) != cudaSuccess) {  // out of memory: give the caches back and try once more
      cudaGetLastError();
      trim();
      cuda::check(cudaMalloc(&p, r), "cudaMalloc");
    }
    block_size[p] = r;
    return p;
  }
  void give(void* p) { cur().free_blocks.emplace(block_size.at(p), CudaStream::FreeBlock{p, record()}); }
  // An event (from the pool) recorded on the current stream.
  cudaEvent_t record() {
    cudaEvent_t e = nullptr;
    if (!free_events.empty()) {
      e = free_events.back();
      free_events.pop_back();
    } else {
      cuda::check(cudaEventCreate(&e), "cudaEventCreate");
    }
    cuda::check(cudaEventRecord(e, stream()), "cudaEventRecord");
    return e;
  }
  // Frees every cached block; waits for the device first, as blocks of other streams may be in use.
  void trim() {
    cudaDeviceSynchronize();
    for (auto& s : streams) {
      for (auto& [size, b] : s.free_blocks) {
        cudaFree(b.p);
        block_size.erase(b.p);
        free_events.push_back(b.freed);
      }
      s.free_blocks.clear();
    }
  }

  // One context per host thread (a process drives several GPUs with a thread each), on the
  // thread's device: 0 unless a process group chose another (select_device) before the context was
  // made; the context and its streams live on that one device.
  static inline thread_local int device_index = 0;
  static inline thread_local bool made = false;
  static void select_device(int device) {
    if (made && device != device_index)
      throw std::runtime_error("CUDA context already made on device " + std::to_string(device_index) +
                               ", cannot move to device " + std::to_string(device));
    device_index = device;
  }
  static inline thread_local CudaContext* instance = nullptr;
  static CudaContext& get() {
    if (!instance) {
      cuda::check(cudaSetDevice(device_index), "cudaSetDevice");
      instance = new CudaContext;
      instance->at(0);
      made = true;
    }
    return *instance;
  }
  // A device thread that is done (ThreadFabric::leave): its streams, handles, events and cached
  // blocks are given back, after the device finished their work.
  static void release_thread() {
    if (!instance) return;
    CudaContext* c = instance;
    cudaDeviceSynchronize();
    c->trim();
    for (auto& s : c->streams) {
      cublasDestroy(s.blas);
      cudaFree(s.workspace);
      cudaStreamDestroy(s.stream);
    }
    for (cudaEvent_t e : c->free_events) cudaEventDestroy(e);
    delete c;
    instance = nullptr;
    made = false;
  }
};

struct Cuda {
  static constexpr const char* kName = "cuda";
  static constexpr int kThreads = 128;

  template <class T> static T* alloc(std::size_t n) {
    return n == 0 ? nullptr : static_cast<T*>(CudaContext::get().take(n * sizeof(T)));
  }
  template <class T> static void release(T* p) {
    if (p) CudaContext::get().give(p);
  }
  template <class T> static void fill_zero(T* p, std::size_t n) {
    if (n) cuda::check(cudaMemsetAsync(p, 0, n * sizeof(T), CudaContext::get().stream()), "cudaMemsetAsync");
  }
  template <class T> static void copy(T* dst, const T* src, std::size_t n) {
    if (n)
      cuda::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, CudaContext::get().stream()),
                  "cudaMemcpyAsync(D2D)");
  }
  template <class T> static void upload(T* dst, const T* host, std::size_t n) { transfer(dst, host, n, cudaMemcpyHostToDevice); }
  template <class T> static void download(T* host, const T* src, std::size_t n) { transfer(host, src, n, cudaMemcpyDeviceToHost); }
  template <class T>
  static void gemm(T* out, const T* a, const T* b, int m, int n, int k, bool trans_a, bool trans_b, bool accumulate) {
    CudaContext& c = CudaContext::get();
    c.gemm_flops += 2.0 * m * n * k;
    cuda::gemm_rowmajor<T>(c.cur().blas, c.stream(), out, a, b, m, n, k, trans_a, trans_b, accumulate);
  }
  template <class T> static double sumsq_acc(double acc, const T* x, std::size_t n) {
    if (n == 0) return acc;
    CudaContext& c = CudaContext::get();
    auto* partial = static_cast<double*>(c.take(sizeof(double) * (kSumBlocks + 1)));
    sumsq_blocks<T><<<kSumBlocks, kSumThreads, 0, c.stream()>>>(partial, x, n);
    sum_partials<<<1, 1, 0, c.stream()>>>(partial + kSumBlocks, partial, acc);
    cuda::check(cudaGetLastError(), "sumsq");
    double out = 0;
    transfer(&out, partial + kSumBlocks, 1, cudaMemcpyDeviceToHost);
    c.give(partial);
    return out;
  }
  // Timing marks: CUDA events recorded on the stream, read back once they completed.
  using Event = cudaEvent_t;
  static Event record() { return CudaContext::get().record(); }
  static double seconds(Event from, Event to) {
    cuda::check(cudaEventSynchronize(to), "cudaEventSynchronize");
    float ms = 0;
    cuda::check(cudaEventElapsedTime(&ms, from, to), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e-3;
  }
  static void release_event(Event e) { CudaContext::get().free_events.push_back(e); }
  // Streams: everything after set_stream(id) is queued on stream id (created on first use); wait(e)
  // orders the current stream after the event e of any stream.
  static void set_stream(int id) { CudaContext::get().current = id; }
  static int stream_id() { return CudaContext::get().current; }
  static void wait(Event e) { cuda::check(cudaStreamWaitEvent(CudaContext::get().stream(), e, 0), "cudaStreamWaitEvent"); }
  static void synchronize_all() { cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
  static void synchronize() { cuda::check(cudaStreamSynchronize(CudaContext::get().stream()), "cudaStreamSynchronize"); }
  static double gemm_flops_total() { return CudaContext::get().gemm_flops; }
  template <class F> static void launch(long n, F f) {
    if (n <= 0) return;
    // Few threads (a scan over (batch, head, row), a per-token pass at small batch): blocks of 32,
    // so they spread over all SMs instead of filling a few. Same threads, same work: same bits.
    const int threads = n < 132L * kThreads ? 32 : kThreads;
    const long blocks = (n + threads - 1) / threads;
    launch_kernel<<<static_cast<unsigned>(blocks), threads, 0, CudaContext::get().stream()>>>(n, f);
    cuda::check(cudaGetLastError(), "kernel launch");
  }

 private:
  template <class T>
  static void transfer(T* dst, const T* src, std::size_t n, cudaMemcpyKind kind) {
    if (n == 0) return;
    const cudaStream_t s = CudaContext::get().stream();
    cuda::check(cudaMemcpyAsync(dst, src, n * sizeof(T), kind, s), "cudaMemcpyAsync");
    cuda::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
};

}  // namespace ht::engine::dev
