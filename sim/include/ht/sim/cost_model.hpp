// How long a compute node of the plan runs on one GPU when nothing else disturbs it. The replay
// asks this for every compute node; communication time is not here (SimGrid's flow model makes
// it). Two sources, in this order of preference:
//   1. a measured-duration table (from --costs JSON, later fitted by calibration), keyed by
//      "slot/phase/symbols", "slot/phase" or "slot" (first match wins), e.g. "mlp/backward/E";
//   2. the node's kernels (schedule::Work) timed from their shapes: GEMMs by tile and wave
//      quantisation on the GPU's SMs, flash attention at FlashAttention-3's measured efficiency for
//      its sequence length and head size, recurrences and elementwise work by FLOPs or memory
//      traffic (kernel_time.cpp), plus the launch overhead;
//   3. for nodes without kernels (version-1 plan files): a roofline,
//      max(flops / (peak * eff), mem_bytes / (hbm * eff)) + launch overhead.
//
// A measured run adds what the plan cannot know (calibrate.hpp): how much of the table entry
// scales with the rows a node processes (the experts' share of the routed tokens), and, per node
// instance of that run, its rows and the bytes it sent to each peer. A plan of the same model,
// data and EP size routes the same tokens (the math is bitwise the same under every schedule), so
// the twin replays another schedule of it with the measured routing; other plans get the means.
//
// Delayed wgrad. A backward entry also records the planned FLOPs of the nodes it was measured on
// ("flops"); a backward or W node is priced at the entry times its own planned FLOPs over those.
// So a backward measured without delayed wgrad (input and weight gradients together) prices a
// delayed plan's B node and its W node by their shares of it (costs.hpp: B the input-gradient
// work, W the weight-gradient GEMMs; B + W = the fused backward), and a W node without an entry
// of its own takes the slot's backward entry.
//
// JSON form (every field optional):
//   { "launch_overhead_us": 4, "host_launch_us": 11, "grouped_launch_us": 32, "comm_launch_us": 0, "interference_factor": 1.15, "wake_latency_us": 90,
//     "durations_us": { "mlp/backward/E": 850.5, "pre_dispatch/forward": 310, "post_process": 90 },
//     "comm_work_us": { "combine/forward": { "before": 90, "after": 520 }, "dispatch/backward": 130 },
//     "rows_us": { "mlp/backward/E": { "per_row_us": 2.1, "mean_rows": 405 } },
//     "flops": { "mlp/backward/E": 4.1e9 },
//     "kernel_table": { "device": "NVIDIA H100 80GB HBM3", "sizes": [256, ..., 4096],
//                       "gemm_bf16_tflops": [sizes^3 numbers], "hbm_gbps": 3010 },
//     "instances": { "3/F mb2 L1 mlp": { "rows": 412 },
//                    "3/F mb2 L1 dispatch": { "sent_bytes": { "0": 65536, "1": 0, "2": 131072 } } } }
// Slot and phase names are schedule::to_string(Slot) / to_string(Phase); an instance is
// "<global rank>/<node label>".
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ht/schedule/kernels.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/sim/platform.hpp"

namespace ht::sim {

// Duration = table entry + per_row_s x (rows - mean_rows) for a node whose rows are known.
struct RowScaling {
  double per_row_s = 0;
  double mean_rows = 0;
  bool operator==(const RowScaling&) const = default;
};

struct CommWork {
  double before_s = 0, after_s = 0;
  bool operator==(const CommWork&) const = default;
};

// What one node of a measured run did.
struct MeasuredInstance {
  int rows = -1;                          // rows its experts processed; -1 unknown
  bool has_sends = false;
  std::vector<schedule::Transfer> sends;  // bytes to each peer (global rank), when has_sends
  bool operator==(const MeasuredInstance&) const = default;
};

struct CostModel {
  double launch_overhead_s = 0;     // per compute node, on top of the kernels (calibration's fit)
  // Host time to issue one kernel from Megatron's Python (PyTorch eager: back-to-back small ops
  // run at 11-18 us each, NVIDIA dgxc-benchmarking cpu_overhead; the fastest is taken), and each
  // expert GEMM of a grouped GEMM in Transformer Engine's multi-stream cuBLASLt loop: TE PR 3134
  // measured that loop at 0.267 ms for 8 experts' GEMMs from one call (B200, per-tensor NVFP4,
  // operands prepared, GEMMs only; one CUTLASS launch does the same work in 0.069 ms, so the GPU is
  // not what it waits on): (267 - 11) / 8 = 32 us an expert GEMM, the loop's fixed cost spread
  // over its GEMMs. The loop's host work (cuBLASLt descriptors, heuristic query, launch, stream
  // events) is the same code for BF16 on Hopper; no Hopper BF16 timing of it is published, so this
  // one point stands for both. A compute node takes the longer of its kernels' GPU time and this
  // host time (physics.md 3).
  double host_launch_s = 11e-6;
  double grouped_launch_s = 32e-6;
  double comm_launch_s = 0;         // added to every non-empty communication node, before it starts
  // Host work of a communication node by "slot/phase" (e.g. "combine/forward"): before its
  // transfers (packing send buffers, the combine backward's local part), which delays its
  // arrival at the rendezvous, and after them (unpacking received rows, the combine's unpermute
  // and residual add). A pause on a GPU, CPU work on the shared cores of the CPU backend
  // (PlatformSpec::host_cores).
  std::map<std::string, CommWork, std::less<>> comm_work_s;
  // Slowdown of compute while a communication of the same GPU is in flight (SM and HBM sharing
  // with NCCL kernels; simulators.md 1.3). 1 = off. Compute runs at 1/factor of its speed then.
  double interference_factor = 1.0;
  // Time a stream that blocked (on another node, a rendezvous or incoming data) takes to run
  // again once unblocked: the wake-up of a sleeping thread (CPU backend) or of a waiting kernel.
  double wake_latency_s = 0;
  std::map<std::string, double, std::less<>> measured_s;  // key -> seconds (table above)
  std::map<std::string, RowScaling, std::less<>> row_scaling;      // same keys as measured_s
  std::map<std::string, double, std::less<>> measured_flops;       // backward/weight keys: planned FLOPs measured
  std::map<std::string, MeasuredInstance, std::less<>> instances;  // instance_key -> measured
  // Kernel rates of a real GPU ("kernel_table", written by `hybrid-twin calibrate --gpu`);
  // apply_kernel_table puts them on the platform's GPU.
  std::shared_ptr<const MeasuredKernels> kernels;
  bool operator==(const CostModel&) const = default;

  // Seconds of a compute node on `gpu`: table first (scaled by its measured rows), else its
  // kernels (`work`, with the plan's delayed-wgrad setting), else the roofline.
  double compute_seconds(const schedule::Node& node, const GpuSpec& gpu, const schedule::Work* work = nullptr,
                         bool delay_wgrad = false, bool cuda_graphs = false) const;
  // Host seconds to launch a work's kernels in `phase`; CUDA graphs replay all but the dropless
  // expert GEMMs without host work.
  double host_seconds(const schedule::Work& work, schedule::Phase phase, bool delay_wgrad, bool cuda_graphs) const;
  // The table entry used for `node`, or nullptr when the roofline applies.
  const double* measured_for(const schedule::Node& node) const;
  // comm_work_s of a comm node (zeros when the table has no entry for its slot/phase).
  CommWork comm_work(const schedule::Node& node) const;
  // The measured instance of `node`, or nullptr.
  const MeasuredInstance* instance_for(const schedule::Node& node) const;
  static std::string instance_key(const schedule::Node& node);  // "<rank>/<label>"
};

// Fraction of its speed a rank's compute keeps while a communication kernel holding `held_sms`
// SMs runs beside it (replay.cpp's interference; the search's lower bound): `costs`'s
// interference_factor F when set (1/F); none on a platform of shared CPU cores (host_cores);
// otherwise the SMs left, (S - held)/S, at the clock under overlap (GpuSpec::overlap_clock).
double speed_beside_comm(const CostModel& costs, const PlatformSpec& platform, double held_sms);

// The kernel model (kernel_time.cpp). GEMM: the measured sm_90 BF16 rate of its shape (OpenXLA's
// table, interpolated in log size), scaled to the GPU's peak and best-shape fraction; grouped
// GEMMs as one GEMM per group on four streams; never faster than its bytes over HBM. Attention
// efficiency: FlashAttention-3's figures by sequence length (causal forward; backward = full
// backward x causal/full forward), scaled by head size.
// Achieved FLOP/s of one (m x k)(k x n) BF16 GEMM on `gpu` (the measured sm_90 table, scaled).
// With fp8: the same shape curve at the GPU's FP8 peak and best FP8 fraction.
double gemm_rate(double m, double n, double k, const GpuSpec& gpu, bool fp8 = false);
double gemm_seconds(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu, bool fp8 = false);
// The same BF16 GEMM at a measured table's burst rates (its sustained fraction left out): what
// the table's grouped GEMMs, short runs, are held against.
double gemm_seconds_burst(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu);
// A measured table's correction of the grouped-GEMM rule (1 without measured grouped GEMMs or for
// one group): measured seconds over gemm_seconds' at the grid points of the measured (k, n)
// nearest (k, n) in log2, bilinear in log2 of rows per expert and of experts, clamped to the grid.
double grouped_correction(double rows, double groups, double k, double n, const GpuSpec& gpu);
double attention_efficiency(double seq, double head_dim, bool backward, const GpuSpec& gpu);
// GDN's chunked gated delta rule (FLA's Triton kernels, which Megatron runs), measured on an H100
// with d = 128 (flashinfer PRs 3866 and 3788; FLOPs as 6 N Hv dk dv): 26.4 TFLOP/s with 8
// independent chains (sequence x value head), 47.6 with 64 and more; the backward takes 3.45x
// the forward (FLA's fwd+bwd benchmark shapes on B200, 3.38-3.55x, pytorch/helion
// examples/linear/BENCHMARKS.md; no Hopper figure published). Launches counted from FLA's
// fla/ops/gated_delta_rule/chunk.py: forward cumsum, kkt, solve_tril, w/u, state pass, output;
// backward w/u and state recompute, dv, dh, dq/dk/dw/dg, WY backward, reverse cumsum.
inline constexpr double kDeltaRuleTflops8 = 26.4;
inline constexpr double kDeltaRuleTflops64 = 47.6;
inline constexpr double kDeltaRuleBackward = 3.45;
inline constexpr int kDeltaRuleForwardLaunches = 6;
inline constexpr int kDeltaRuleBackwardLaunches = 7;
double delta_rule_rate(double chains, const GpuSpec& gpu);  // forward FLOP/s
// Megatron's gradient-accumulation fusion (on by default): a weight-gradient GEMM accumulates into
// the parameter's fp32 main gradient (GEMM with beta = 1), so where the forward read each weight
// element once (2 bytes in BF16) the weight gradient reads and writes it in fp32 (8 bytes).
inline constexpr double kMainGradAccumulateBytes = 8;
// HBM bytes of a GEMM kernel's weight gradient: its forward `bytes` (as priced, FP8 halved) with
// the weights' elements moved as fp32 read-and-write accumulation instead of one read.
double wgrad_bytes(const schedule::Kernel& kernel, double bytes);
double kernel_seconds(const schedule::Kernel& kernel, schedule::Phase phase, bool delay_wgrad, const GpuSpec& gpu);
// Kernels launched for `kernel` in `phase`: a GEMM once forward, data and weight gradient
// backward (the latter in W when delayed), times its groups; flash attention's backward three
// (preprocess, main, dQ conversion); the rest once per phase.
int kernel_launches(const schedule::Kernel& kernel, schedule::Phase phase, bool delay_wgrad);
double work_seconds(const schedule::Work& work, schedule::Phase phase, bool delay_wgrad, const GpuSpec& gpu);

// The platform priced with the cost model's measured kernel table, if it has one: GEMMs from
// the table, memory-bound kernels at the measured HBM bandwidth (as the fraction of the spec
// sheet's peak it reached).
void apply_kernel_table(PlatformSpec& platform, const CostModel& costs);

// Parses the JSON form; throws SimError(BadCosts) with the offending field.
CostModel parse_costs_json(std::string_view json_text, CostModel base = {});
CostModel load_costs_file(const std::string& path, CostModel base = {});
// Applies "key=value" (launch_overhead_us, comm_launch_us, interference_factor, wake_latency_us).
void set_cost_key(CostModel& model, std::string_view key, std::string_view value);

}  // namespace ht::sim
