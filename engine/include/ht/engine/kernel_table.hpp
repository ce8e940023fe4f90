// Kernel tables from a real GPU (`hybrid-twin calibrate --gpu`): microbenchmarks, on the local
// GPU through the CUDA backend, of what the twin prices by shape, written as a cost file that
// `simulate --costs` reads, so that one GPU gives a twin of that hardware:
//  - BF16 GEMMs (cuBLAS, fp32 accumulation) on the grid m, n, k in {256, 512, 1024, 2048, 4096}
//    (the grid of the twin's built-in sm_90 table, so the measured one replaces it shape for
//    shape), TFLOP/s of the fastest of `repeats` timed runs after a warm-up, on random operands
//    (a GEMM on zeros draws less power and runs faster on a power-capped GPU; OpenXLA's table is
//    measured on random operands too);
//  - HBM bandwidth: a streaming copy kernel over buffers far larger than L2 (bytes read + written);
//  - grouped GEMMs as Transformer Engine's GroupedLinear runs them on Hopper in BF16: one cuBLASLt
//    GEMM per expert, round-robin over 4 streams (TE common/util/multi_stream.cpp), each set up on
//    the host as TE's loop does (matmul and layout descriptors, a heuristic query, the launch, the
//    descriptors destroyed), on a grid of experts x rows per expert x (k, n) shapes of real MoE
//    layers: the GPU time of the whole group (the fastest of `repeats`), and the host time the
//    loop takes per expert GEMM (the twin's `grouped_launch_us`: the longer of the two is what a
//    grouped GEMM costs when the host cannot run ahead);
//  - the sustained GEMM rate: back-to-back 8192^3 BF16 GEMMs for `sustain_seconds`, TFLOP/s per
//    window of about half a second, against the median single one (the burst rate every table
//    above is, like OpenXLA's and MAMF's): a GPU under sustained tensor-core load holds a lower
//    clock than a short benchmark sees (power and heat), and training is sustained load;
//  - GEMMs beside held SMs: 4096^3 BF16 GEMMs back to back while a kernel of s CTAs, each owning
//    an SM (all the shared memory a block may take), resident before the GEMMs are issued and
//    spinning until they are done, holds s SMs, as a communication
//    kernel holds its SMs (NCCL 16, DeepEP 20, HybridEP 8, a p2p send 2): the GEMMs' rate beside
//    it over their rate alone. The twin's rule is (S - s)/S; a GEMM whose CTAs cannot all be
//    resident (persistent kernels sized to the SM count, waves) may do worse;
//  - the device's name, SM count and memory.
// The host emulation runs the same sequence on the CPU (float32 GEMMs with every size divided by
// 16, a memcpy for the bandwidth, the experts' GEMMs one after the other) so that the program and
// the file are tested without a GPU; its figures describe the CPU and the file says so
// ("emulated": true).
// Not measured yet: attention (the engine has no FlashAttention or cuDNN kernel to time), scans,
// NCCL collectives inside the node (need two or more GPUs).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht::engine {

struct KernelTable {
  std::string device;
  bool emulated = false;
  int sms = 0;
  double memory_bytes = 0;
  std::vector<int> sizes;                // the grid, ascending
  std::vector<double> gemm_bf16_tflops;  // sizes^3 entries, index (im * n + in) * n + ik
  double hbm_bytes_per_s = 0;            // achieved by the copy kernel
  // Grouped GEMMs: seconds of the whole group, index (ie * rows.size() + ir) * shapes.size() + is,
  // the forward (rows x k)(k x n) of every expert; empty when not measured.
  std::vector<int> grouped_experts;                 // ascending
  std::vector<int> grouped_rows;                    // rows per expert, ascending
  std::vector<std::pair<int, int>> grouped_shapes;  // (k, n)
  std::vector<double> grouped_seconds;
  double grouped_launch_s = 0;  // host seconds per expert GEMM of TE's loop; 0 = not measured
  // Sustained rate: the GEMM's edge (m = n = k), the fastest single one, TFLOP/s per window, and
  // the mean of the last quarter of the windows over the burst (0 = not measured).
  int sustained_size = 0;
  double burst_tflops = 0;
  std::vector<double> window_tflops;
  double sustained_fraction = 0;
  // GEMMs beside held SMs: SMs held, and the GEMMs' rate beside them over alone (empty: not measured).
  std::vector<int> sharing_sms;
  std::vector<double> sharing_speed;
};

struct KernelBenchOptions {
  bool emulate = false;  // the host emulation instead of the GPU
  int repeats = 10;
  std::vector<int> sizes{256, 512, 1024, 2048, 4096};
  // The grouped-GEMM grid: experts on the rank, rows per expert, and (k, n) of Qwen3-235B-A22B's
  // (hidden 4096, expert FFN 1536) and Qwen3-30B-A3B's (2048, 768) expert fc1 (gate and up) and
  // fc2, from their Hugging Face configs.
  std::vector<int> grouped_experts{4, 8, 16, 32};
  std::vector<int> grouped_rows{128, 512, 2048};
  std::vector<std::pair<int, int>> grouped_shapes{{4096, 3072}, {1536, 4096}, {2048, 1536}, {768, 2048}};
  double sustain_seconds = 10;  // back-to-back GEMMs for the sustained rate (0: not measured)
  std::vector<int> sharing_sms{2, 8, 16, 20, 24, 32};  // SMs held beside the GEMMs (empty: not measured)
};

// The sustained figures from the windows' rates and the burst rate: the mean of the last quarter
// of the windows (at least one) over the burst.
double sustained_fraction(const std::vector<double>& window_tflops, double burst_tflops);

// The GEMMs' speed beside held SMs: the fastest time alone (measured again before each count held,
// so a burst of noise on one side cannot pass for a speed-up) over the time beside. Held SMs only
// take from the GEMMs, so a ratio above 1 is timing noise and reads 1.
double sharing_speed(double fastest_alone_seconds, double beside_seconds);

// On GPU 0 (throws std::runtime_error without a usable GPU or without the CUDA backend), or the
// host emulation.
KernelTable measure_kernel_table(const KernelBenchOptions& options);

// The cost-file form (sim/cost_model.hpp, "kernel_table"), and back (throws std::runtime_error
// naming the field).
nlohmann::json kernel_table_to_json(const KernelTable& table);
KernelTable kernel_table_from_json(const nlohmann::json& j);

// Clears each optional part of a measured table (grouped GEMMs with their host time, the sustained
// rate, the speeds beside held SMs) that the table's own reader would refuse, a figure out of its
// range (a GPU shared or throttled while it was measured), and returns one line per part cleared
// with the reader's reason: a long measurement then still writes the parts that hold, and never a
// file that `simulate --costs` refuses. Throws std::runtime_error when the GEMM rates and the
// bandwidth, which every table needs, are unreadable themselves.
std::vector<std::string> drop_unreadable_parts(KernelTable& table);

namespace cuda {
// The GPU side of measure_kernel_table (engine/cuda/src/kernel_bench.cu).
KernelTable measure_kernel_table_cuda(const KernelBenchOptions& options);
}  // namespace cuda

}  // namespace ht::engine
