// The GPU side of the kernel table (kernel_table.hpp): cuBLAS BF16 GEMMs on the grid, a
// streaming copy kernel, and grouped GEMMs the way Transformer Engine's GroupedLinear issues them,
// timed with CUDA events on GPU 0.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "entry_points.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/kernel_table.hpp"

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

// GEMM operands are random, never zeros: a GEMM's power, and so the clock a power-capped GPU
// holds, depends on its data (8192^3 on an A100: 295 TFLOP/s on zeros, 257 on normal random
// values; Horace He, "Strangely, Matrix Multiplications on GPUs Run Faster When Given
// 'Predictable' Data", 2024), and OpenXLA's built-in table was measured on random operands
// (xla/tools/matmul_perf_table_gen.cc: MakeFakeArguments), so the two tables compare. Values
// uniform in [-1, 1) from an integer hash of the index and a seed.
__global__ void fill_random_kernel(__nv_bfloat16* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) ^ (static_cast<std::uint32_t>(i >> 32) * 0x9e3779b9u) ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    p[i] = __float2bfloat16(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

void fill_random(void* p, std::size_t elems, std::uint32_t seed) {
  fill_random_kernel<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), elems, seed);
  check(cudaGetLastError(), "fill kernel");
  check(cudaDeviceSynchronize(), "fill kernel");
}

// A square BF16 GEMM (edge^3) on random operands, run on the handle's stream.
struct SquareGemm {
  int edge;
  Device a, b, c;
  SquareGemm(int e, std::uint32_t seed)
      : edge(e),
        a(std::size_t(e) * e * sizeof(__nv_bfloat16)),
        b(std::size_t(e) * e * sizeof(__nv_bfloat16)),
        c(std::size_t(e) * e * sizeof(__nv_bfloat16)) {
    fill_random(a.p, std::size_t(e) * e, seed);
    fill_random(b.p, std::size_t(e) * e, seed + 1);
  }
  double flops() const { return 2.0 * edge * double(edge) * edge; }
  void run(cublasHandle_t blas) const {
    const float alpha = 1, beta = 0;
    check(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, edge, edge, edge, &alpha, b.p, CUDA_R_16BF, edge, a.p,
                       CUDA_R_16BF, edge, &beta, c.p, CUDA_R_16BF, edge, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (bf16)");
  }
};

// Fastest of `repeats` runs of `run` after one warm-up, in seconds, by CUDA events.
// `before` is queued ahead of each timed run, outside the events.
template <class F, class B = void (*)()>
double fastest(cudaStream_t stream, int repeats, F&& run, B before = [] {}) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  run();
  check(cudaStreamSynchronize(stream), "warm-up");
  float best = 1e30f;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    before();
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

// Streams TE's multi-stream GEMM loop spreads a grouped GEMM over (transformer_engine/common/
// util/multi_stream.cpp), and the cuBLAS workspace it gives each (32 MiB on Hopper).
constexpr int kGroupedStreams = 4;
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

// One expert's forward GEMM of a grouped linear, set up on the host as TE's loop sets up every GEMM
// (transformer_engine/common/gemm/cublaslt_gemm.cu): a matmul descriptor, layouts, a preference,
// a heuristic query, the launch, everything destroyed again. y (rows x n) = x (rows x k) w^T with
// w (n x k) row-major, as column-major cuBLASLt: TN, m' = n, n' = rows.
void lt_gemm(cublasLtHandle_t lt, const void* w, const void* x, void* y, int rows, int k, int n, void* workspace,
             cudaStream_t stream) {
  cublasLtMatmulDesc_t op = nullptr;
  check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "TRANSA");
  check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "TRANSB");
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  check(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k), "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, rows, k), "cublasLtMatrixLayoutCreate");
  check(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, n, rows, n), "cublasLtMatrixLayoutCreate");
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t bytes = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes),
        "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t found{};
  int count = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &found, &count), "cublasLtMatmulAlgoGetHeuristic");
  if (count == 0) throw std::runtime_error("cuBLASLt has no algorithm for a grouped GEMM shape");
  const float alpha = 1, beta = 0;
  check(cublasLtMatmul(lt, op, &alpha, w, a, x, b, &beta, y, c, y, c, &found.algo, workspace, kWorkspaceBytes, stream),
        "cublasLtMatmul (bf16)");
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatmulDescDestroy(op);
}

// Spins for `ns` nanoseconds of the GPU's global timer. One block holds its stream: work queued
// behind it starts only once the host has issued all of it, so events around that work time the
// GPU. Blocks launched with all the shared memory a block may take each own the SM they land on
// (no other block fits beside them): a communication kernel's hold on its SMs, without its traffic.
__global__ void spin_kernel(unsigned long long ns, volatile unsigned* ready, const volatile unsigned* stop) {
  extern __shared__ unsigned char owned[];
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  // Resident: each block says so in its own slot of mapped host memory (see Occupier).
  if (ready != nullptr && threadIdx.x == 0) {
    ready[blockIdx.x] = 1;
    __threadfence_system();
  }
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns && (stop == nullptr || *stop == 0));
  if (threadIdx.x == 0 && now == 0) owned[0] = 1;  // keeps the allocation; never true
}

// The grouped-GEMM grid (kernel_table.hpp). For each point: the host time of TE's loop over the
// experts (the fastest of the runs, per expert GEMM; the table keeps the median over the grid), and
// the GPU time of the whole group (the fastest of `repeats`): L2 flushed (a layer's expert weights
// come from HBM), then the stream held until the host has queued every GEMM, then events on the
// calling stream around the fork to 4 streams and the join.
void measure_grouped(KernelTable& t, const KernelBenchOptions& o, cudaStream_t main, std::size_t l2_bytes) {
  int max_k = 0, max_n = 0;
  for (const auto& [k, n] : o.grouped_shapes) {
    max_k = std::max(max_k, k);
    max_n = std::max(max_n, n);
  }
  const std::size_t experts = static_cast<std::size_t>(o.grouped_experts.back());
  const std::size_t rows = static_cast<std::size_t>(o.grouped_rows.back());
  const std::size_t x_elems = rows * std::size_t(max_k), w_elems = std::size_t(max_n) * max_k,
                    y_elems = rows * std::size_t(max_n);
  Device x(experts * x_elems * sizeof(__nv_bfloat16)), w(experts * w_elems * sizeof(__nv_bfloat16)),
      y(experts * y_elems * sizeof(__nv_bfloat16)), workspace(kGroupedStreams * kWorkspaceBytes);
  const std::size_t flush_bytes = std::max<std::size_t>(2 * l2_bytes, std::size_t{64} << 20);
  Device flush(flush_bytes);
  fill_random(x.p, experts * x_elems, 3);
  fill_random(w.p, experts * w_elems, 4);
  cublasLtHandle_t lt = nullptr;
  check(cublasLtCreate(&lt), "cublasLtCreate");
  std::array<cudaStream_t, kGroupedStreams> side{};
  std::array<cudaEvent_t, kGroupedStreams + 1> fork_join{};
  for (auto& s : side) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  for (auto& e : fork_join) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  auto bf16_at = [](void* base, std::size_t elems) { return static_cast<__nv_bfloat16*>(base) + elems; };
  std::vector<double> host_per_gemm;
  for (int g : o.grouped_experts)
    for (int m : o.grouped_rows)
      for (const auto& shape : o.grouped_shapes) {
        const int k = shape.first, n = shape.second;
        // One group as TE issues it; returns the host time of the loop over the experts.
        auto group = [&] {
          check(cudaEventRecord(fork_join[0], main), "cudaEventRecord");
          for (auto& s : side) check(cudaStreamWaitEvent(s, fork_join[0], 0), "cudaStreamWaitEvent");
          const auto t0 = std::chrono::steady_clock::now();
          for (int e = 0; e < g; ++e)
            lt_gemm(lt, bf16_at(w.p, e * w_elems), bf16_at(x.p, e * x_elems), bf16_at(y.p, e * y_elems), m, k, n,
                    static_cast<char*>(workspace.p) + (e % kGroupedStreams) * kWorkspaceBytes,
                    side[static_cast<std::size_t>(e % kGroupedStreams)]);
          const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          for (int s = 0; s < kGroupedStreams; ++s) {
            check(cudaEventRecord(fork_join[static_cast<std::size_t>(s) + 1], side[static_cast<std::size_t>(s)]),
                  "cudaEventRecord");
            check(cudaStreamWaitEvent(main, fork_join[static_cast<std::size_t>(s) + 1], 0), "cudaStreamWaitEvent");
          }
          return host;
        };
        double host = group();  // warm-up (cuBLASLt's heuristic cache, the kernels' first load)
        check(cudaStreamSynchronize(main), "warm-up");
        for (int r = 0; r < std::max(1, o.repeats); ++r) {
          host = std::min(host, group());
          check(cudaStreamSynchronize(main), "grouped GEMM");
        }
        const auto hold_ns = static_cast<unsigned long long>(2e9 * host) + 100000ull;
        int flushes = 0;
        t.grouped_seconds.push_back(fastest(main, o.repeats, group, [&] {
          check(cudaMemsetAsync(flush.p, ++flushes & 1, flush_bytes, main), "L2 flush");
          spin_kernel<<<1, 1, 0, main>>>(hold_ns, nullptr, nullptr);
          check(cudaGetLastError(), "spin kernel");
        }));
        host_per_gemm.push_back(host / g);
      }
  std::sort(host_per_gemm.begin(), host_per_gemm.end());
  t.grouped_launch_s = host_per_gemm[host_per_gemm.size() / 2];
  t.grouped_experts = o.grouped_experts;
  t.grouped_rows = o.grouped_rows;
  t.grouped_shapes = o.grouped_shapes;
  for (auto& e : fork_join) cudaEventDestroy(e);
  for (auto& s : side) cudaStreamDestroy(s);
  cublasLtDestroy(lt);
}

// The sustained rate (kernel_table.hpp): 8192^3 BF16 GEMMs back to back for o.sustain_seconds,
// timed by events in windows of about half a second, after the fastest single one (the burst).
// Last, so that every table above was measured before the GPU had run hot for seconds.
void measure_sustained(KernelTable& t, const KernelBenchOptions& o, cublasHandle_t blas, cudaStream_t stream) {
  if (!(o.sustain_seconds > 0)) return;
  const SquareGemm square(8192, 5);
  auto gemm = [&] { square.run(blas); };
  const double flops = square.flops();
  // The burst: the median of single GEMMs, each timed alone after an idle sync (a median, as the
  // windows' figure is a mean: the fastest of several would bias the fraction below 1).
  std::vector<double> singles;
  for (int r = 0; r < std::max(3, o.repeats); ++r) singles.push_back(fastest(stream, 0, gemm));
  std::sort(singles.begin(), singles.end());
  const double burst = singles[singles.size() / 2];
  t.sustained_size = square.edge;
  t.burst_tflops = flops / burst / 1e12;
  // GEMMs per window: about half a second at the burst rate.
  const int per_window = std::max(1, static_cast<int>(0.5 / burst));
  cudaEvent_t w0, w1;
  check(cudaEventCreate(&w0), "cudaEventCreate");
  check(cudaEventCreate(&w1), "cudaEventCreate");
  double total = 0;
  while (total < o.sustain_seconds) {
    check(cudaEventRecord(w0, stream), "cudaEventRecord");
    for (int i = 0; i < per_window; ++i) gemm();
    check(cudaEventRecord(w1, stream), "cudaEventRecord");
    check(cudaEventSynchronize(w1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, w0, w1), "cudaEventElapsedTime");
    const double seconds = std::max(1e-9, double(ms) * 1e-3);
    t.window_tflops.push_back(per_window * flops / seconds / 1e12);
    total += seconds;
  }
  cudaEventDestroy(w0);
  cudaEventDestroy(w1);
  t.sustained_fraction = sustained_fraction(t.window_tflops, t.burst_tflops);
}

// GEMMs beside held SMs (kernel_table.hpp): 8 back-to-back 4096^3 GEMMs, alone and beside an
// occupier of `held` SMs launched first on another stream and held three times as long as the
// GEMMs take alone (so that they run inside it unless they wait for its SMs), the fastest of
// `repeats` each way.
// A kernel of `held` blocks that each own an SM (spin_kernel with all the shared memory a block may
// take), on a stream of the highest priority, started only once every block is resident (the
// blocks mark mapped host memory; the host waits for all of them) and stopped by the host, with a
// deadline as a fallback.
class Occupier {
 public:
  Occupier(const cudaDeviceProp& prop, int most) : smem_(static_cast<int>(prop.sharedMemPerBlockOptin)) {
    check(cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_),
          "cudaFuncSetAttribute (occupier shared memory)");
    int per_sm = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin_kernel, 32, smem_), "occupancy");
    if (per_sm != 1) throw std::runtime_error("an occupier block cannot own an SM on this GPU");
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
    check(cudaHostAlloc(&flags_, (std::size_t(most) + 1) * sizeof(unsigned), cudaHostAllocMapped), "cudaHostAlloc");
    check(cudaHostGetDevicePointer(&device_flags_, flags_, 0), "cudaHostGetDevicePointer");
  }
  ~Occupier() {
    release();
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    cudaFreeHost(flags_);
  }
  Occupier(const Occupier&) = delete;
  Occupier& operator=(const Occupier&) = delete;

  // Holds `held` SMs from now until release() or `deadline_ns`.
  void hold(int held, unsigned long long deadline_ns) {
    release();
    check(cudaStreamSynchronize(stream_), "occupier");
    volatile unsigned* f = flags_;
    for (int i = 0; i <= held; ++i) f[i] = 0;  // f[held]: the stop word
    spin_kernel<<<held, 32, smem_, stream_>>>(deadline_ns, device_flags_, device_flags_ + held);
    check(cudaGetLastError(), "spin kernel (occupier)");
    stop_ = held;
    const auto start = std::chrono::steady_clock::now();
    for (int resident = 0; resident < held;) {
      resident = 0;
      for (int i = 0; i < held; ++i) resident += f[i] != 0;
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(2))
        throw std::runtime_error("the occupier's blocks did not all become resident");
    }
  }
  void release() {
    if (stop_ >= 0) static_cast<volatile unsigned*>(flags_)[stop_] = 1;
    stop_ = -1;
  }

 private:
  int smem_;
  cudaStream_t stream_ = nullptr;
  unsigned* flags_ = nullptr;
  unsigned* device_flags_ = nullptr;
  int stop_ = -1;
};

void measure_sharing(KernelTable& t, const KernelBenchOptions& o, cublasHandle_t blas, cudaStream_t stream,
                     const cudaDeviceProp& prop) {
  if (o.sharing_sms.empty()) return;
  constexpr int kGemms = 8;
  const SquareGemm square(4096, 7);
  auto gemms = [&] {
    for (int i = 0; i < kGemms; ++i) square.run(blas);
  };
  double alone = fastest(stream, o.repeats, gemms);
  Occupier occupier(prop, o.sharing_sms.back());
  // The deadline only guards a host that never stops it: the GEMMs must end well inside it.
  const auto deadline_ns = static_cast<unsigned long long>(20e9 * alone) + 20000000ull;
  for (int held : o.sharing_sms) {
    if (held >= prop.multiProcessorCount) break;
    alone = std::min(alone, fastest(stream, o.repeats, gemms));
    const double beside = fastest(stream, o.repeats, gemms, [&] { occupier.hold(held, deadline_ns); });
    occupier.release();
    if (beside * 1e9 > 0.5 * double(deadline_ns))
      throw std::runtime_error("GEMMs beside " + std::to_string(held) + " held SMs outlasted the occupier");
    t.sharing_sms.push_back(held);
    t.sharing_speed.push_back(sharing_speed(alone, beside));
  }
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
  fill_random(a.p, largest * largest, 1);
  fill_random(b.p, largest * largest, 2);
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
  measure_grouped(t, o, stream, static_cast<std::size_t>(std::max(0, prop.l2CacheSize)));
  measure_sharing(t, o, blas, stream, prop);
  measure_sustained(t, o, blas, stream);
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return t;
}

}  // namespace gpu
}  // namespace ht::engine::cuda
