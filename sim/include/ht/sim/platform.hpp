// The simulated cluster as a spec sheet: nodes of GPUs behind an NVSwitch, one NIC per GPU into a
// fat-tree, and each GPU's compute and memory roofline. The twin turns a PlatformSpec into a
// SimGrid platform (platform_build) and the cost model reads the GPU part of it. Sits at the start
// of the what-if flow: CLI text -> PlatformSpec -> replay().
//
// Text form (CLI --platform): "PRESET", "PRESET:key=value,key=value" or "FILE.xml[:key=value,...]".
// Units follow the spec sheets they are copied from:
//   nvlink_gbps        NVLink bandwidth per GPU and direction in GB/s (bytes; H100/H200: 450)
//   ib_gbps            NIC line rate per GPU and direction in Gb/s (bits; NDR: 400)
//   *_latency_us       end-to-end latency of one transfer (GPU to GPU) in microseconds
//   *_efficiency       achievable fraction of the nominal figure (0 < e <= 1)
//   peak_tflops        dense bf16 peak in TFLOP/s;  hbm_tbps  HBM bandwidth in TB/s;  hbm_gb  HBM size
//   sms                streaming multiprocessors (GEMM wave quantisation)
//   gemm_efficiency    best large-shape GEMM rate as a fraction of peak (H100 0.803); the measured
//                      sm_90 table of GEMM rates by shape is scaled by it over H100's
//   attention_scale    the flash-attention efficiency curve's scale (1 = FlashAttention-3 on Hopper)
//   scan_efficiency    fraction of peak Mamba2's chunked scan kernels reach
//   delta_rule_scale   GDN's chunked delta rule at this rate over FLA's measured H100 rate
//   fp8_peak_tflops, fp8_gemm_efficiency  FP8 GEMMs (--precision fp8): dense peak, best fraction
//   permute_efficiency fraction of HBM bandwidth MoE permutation kernels reach
//   nccl_sms           SMs an NCCL collective's kernel holds (compute beside it keeps the rest)
//   overlap_clock      SM clock while communication runs beside compute, over the tables' clock
//   slow_gpu_spread    achieved-rate spread between same-SKU GPUs: compute runs at the slowest's
//   oversubscription   fat-tree leaf oversubscription (1 = full bisection)
//   nodes, gpus_per_node  cluster size; nodes = 0 means "as many as the plan needs"
//   nvlink_ingress     1: a GPU's NVLink port caps what it receives as well as what it sends;
//                      0: only senders are limited (the engine's in-process link throttle)
//   host_cores         0: every GPU computes on its own; n > 0: the compute of all ranks and the
//                      host work of their comm streams share n CPU cores, each node using at
//                      most one (the CPU backend, whose rank threads share the machine's cores)
//   comm_priority      with host_cores: 1 = comm-stream work runs ahead of compute on the shared
//                      cores (the engine's real-time comm threads), 0 = they share equally
//
// Preset "cpu-ranks" describes the engine's CPU backend for `hybrid-twin calibrate`: ranks are
// threads on one host, links are the throttle (nvlink_* keys: bandwidth and latency per message,
// efficiency 1, receive side free), and host_cores is the number of CPUs the run could use.
//
// XML platforms: the file provides the network only. Its hosts must be named gpu0 .. gpu<N-1>
// (global rank k runs on host "gpuk"); host speeds and links are used as written, so write them
// for the CM02 model (no TCP corrections). The GPU roofline still comes from the spec (dgx-h100
// defaults plus any key=value overrides after the file name).
//
// Presets and where their figures come from (docs/twin.md lists the quotes):
//   dgx-h100     8 x H100 SXM: 989 TFLOP/s dense BF16, 132 SMs, 80 GB HBM3 at 3.35 TB/s, NVLink 4
//                450 GB/s per direction, one ConnectX-7 400 Gb/s NIC per GPU (NVIDIA datasheet,
//                DGX BasePOD reference architecture)
//   dgx-h200     the same with 141 GB HBM3e at 4.8 TB/s (MLPerf H200-SXM-141GBx8 system file)
//   dgx-h800     as dgx-h100 with NVLink 200 GB/s per direction at 0.8 (DeepEP: ~160 achievable)
//   dgx-b200     8 x B200: 2250 TFLOP/s, 148 SMs, 180 GB at 8 TB/s, NVLink 5 900 GB/s per
//                direction, CX-7 400 Gb/s per GPU (DGX B200 user guide and datasheet)
//   gb200-nvl72  one NVLink domain of 72 GB200 GPUs: 2500 TFLOP/s, 152 SMs, 186 GB at 8 TB/s,
//                NVLink 5 900 GB/s per direction; racks joined by NDR InfiniBand, one CX-7
//                400 Gb/s per GPU (GB200 NVL72 product page, DGX GB200 user guide)
// Efficiencies: NVLink 0.82 (NCCL's maintainers: 370 of 450 GB/s busbw on H100), NIC 0.94 (46-48
// of 50 GB/s per NDR NIC, nccl-tests issues), HBM 0.80 (weight-streaming GEMMs in DeepGEMM's
// table), best-shape GEMM 0.803 of peak on Hopper, 0.776 / 0.729 on B200 / GB200 (Bekman's MAMF
// table), applied to OpenXLA's measured sm_90 rates by shape (kernel_time.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ht::sim {

// Kernel rates measured on a real GPU (`hybrid-twin calibrate --gpu`, a cost file's
// "kernel_table"): BF16 GEMM TFLOP/s on a grid of sizes^3 shapes and the HBM bandwidth a streaming
// copy reaches. When a GpuSpec carries one, its GEMMs and memory-bound kernels are priced from it.
struct MeasuredKernels {
  std::string device;
  bool emulated = false;
  std::vector<double> sizes;
  std::vector<double> gemm_bf16_tflops;  // index (im * n + in) * n + ik
  double hbm_bytes_per_s = 0;
  // Grouped GEMMs as Transformer Engine issues them (one GEMM per expert on 4 streams): seconds of
  // the whole group's forward, index (ie * rows.size() + ir) * shapes.size() + is; empty when the
  // table has none. The twin prices a grouped GEMM at its own rule times the measured time over
  // that rule's time at the measured points (kernel_time.cpp, grouped_correction).
  std::vector<double> grouped_experts, grouped_rows;      // ascending
  std::vector<std::pair<double, double>> grouped_shapes;  // (k, n)
  std::vector<double> grouped_seconds;
  double grouped_launch_s = 0;  // host seconds per expert GEMM of TE's loop; 0 = not measured
  // The GPU's sustained GEMM rate over its burst rate (back-to-back GEMMs for seconds against the
  // fastest single one; 0 = not measured). Every rate table (this one's, OpenXLA's, FlashAttention-3's,
  // FLA's) is a burst figure; apply_kernel_table puts the GPU's compute-bound kernels at this
  // fraction of them and its clock under overlap relative to it.
  double sustained_fraction = 0;
  // GEMMs beside held SMs: the SMs an occupier held and the GEMMs' speed beside it over alone
  // (empty: not measured); speed_beside_comm takes them for the SM share instead of (S - s)/S.
  std::vector<double> sharing_sms, sharing_speed;
  bool operator==(const MeasuredKernels&) const = default;
};

struct GpuSpec {
  double peak_flops = 989e12;        // dense bf16 FLOP/s
  double flops_efficiency = 0.6;     // roofline of nodes without kernel lists (version-1 plans)
  double hbm_bytes_per_s = 3.35e12;  // HBM bandwidth
  double hbm_efficiency = 0.8;       // achieved fraction of HBM bandwidth on streaming kernels
  // HBM capacity as the driver reports it (what CUDA and PyTorch can allocate from): an H100 SXM
  // "80 GB" shows 81559 MiB in nvidia-smi (NVIDIA/nccl issue 1264; modal-labs/modal-client PR
  // 2797), the H800 the same die and memory. The process's own overhead (CUDA context, NCCL and
  // dispatcher buffers) is counted against it by schedule::runtime_overhead.
  double hbm_bytes = 81559.0 * (1 << 20);
  int sms = 132;                     // streaming multiprocessors
  double gemm_efficiency = 0.803;    // best-shape cuBLAS BF16 rate / peak (MAMF: 794.5 of 989 on H100)
  // FP8 GEMMs (--precision fp8|mxfp8): dense FP8 peak and the best-shape fraction of it (MAMF's
  // torch._scaled_mm: H100 1402.6 of 1979, H200 1453.4, B200 3432.5 of 4500; physics.md 1.3),
  // applied to the measured BF16 rates by shape; MXFP8 only where the GPU has it (Blackwell).
  double fp8_peak_flops = 1979e12;
  double fp8_gemm_efficiency = 0.709;
  bool mxfp8 = false;
  double attention_scale = 1.0;      // scale of the flash-attention efficiency curve
  double scan_efficiency = 0.35;     // Mamba2's chunked scan (placeholder: no published figure)
  // GDN's delta rule at the GPU's rate over the H100's measured one (cost_model.hpp): Blackwell
  // runs FLA's kernel 1.46-1.71x an H800 at the same shapes (B200: 56.2 and 64.9 TFLOP/s at
  // B2 T16384 H16 and B1 T8192 H96, pytorch/helion BENCHMARKS.md; H800: 38.4 and 38.0,
  // PaddlePaddle/flash-attention PR 133), 1.58 (their geometric mean) taken.
  double delta_rule_scale = 1.0;
  // MoE permute/unpermute kernels: 30-50 % of HBM (TileOPs' and vLLM's H200 permute benchmarks,
  // physics.md 1.6); the middle is taken.
  double permute_efficiency = 0.4;
  // SMs an NCCL collective's kernel holds while it runs: one CTA per channel, never shared with
  // compute; 16 on a DGX with 8 NICs (NCCL maintainers, NVIDIA/nccl issues 689 and 1598). A
  // point-to-point send uses 2 (NCCL_NCHANNELS_PER_NET_PEER's default, issue 1424).
  int nccl_sms = 16;
  int nccl_p2p_sms = 2;
  // SM clock while communication runs beside compute, over the clock the kernel tables were
  // measured at: a Hopper GPU that overlaps GEMMs with communication exceeds its power limit and
  // drops from 1980 to 1575 MHz (DeepGEMM issue 120, DeepSeek's inference on Hopper; overlap
  // raises peak power by up to 25 %, Lee et al., ISPASS 2025, arXiv 2507.03114). 1575 / 1980.
  // Blackwell: no published figure under overlap, so 1.
  double overlap_clock = 1575.0 / 1980.0;
  std::shared_ptr<const MeasuredKernels> measured;  // null: the built-in tables (kernel_time.cpp)
  // Same-SKU GPUs of one node differ by 5 %+ in achieved GEMM rate (cooling, silicon; Bekman's ML
  // engineering, "Not all accelerators are created equal"), and a synchronous step runs at the
  // slowest: compute is priced at 1 / (1 - spread) of a benchmarked GPU's time (physics.md 1.2).
  double slow_gpu_spread = 0.05;
  // Host link, achieved, each way (activation offloading's copies): PCIe 5 x16 moves 55.4 / 55.1
  // GB/s host to device / device to host per GPU (8x H200, ml-engineering network/README.md,
  // physics.md 1.6); the same link on H100, H800 and B200 boards. GB200: NVLink-C2C, 900 GB/s both
  // ways for the Grace CPU and its two GPUs (NVIDIA's GB200 specification): 225 per GPU each way,
  // no achieved figure published.
  double host_link_bytes_per_s = 55e9;
  bool operator==(const GpuSpec&) const = default;
};

struct PlatformSpec {
  std::string name = "dgx-h100";  // preset name, or the XML file path
  std::string xml_file;           // non-empty: network from this SimGrid XML file
  int nodes = 0;                  // 0 = sized to the plan (ceil(world / gpus_per_node))
  int gpus_per_node = 8;
  // Intra-node: every GPU has a full-duplex NVLink port into the NVSwitch.
  double nvlink_bytes_per_s = 450e9;
  double nvlink_efficiency = 0.82;  // NCCL busbw 370 of 450 GB/s (nccl-tests issue 212)
  double nvlink_latency_s = 2e-6;
  // Inter-node: one NIC per GPU into a fat-tree; oversubscription divides the leaf uplinks.
  double nic_bytes_per_s = 50e9;  // 400 Gb/s
  double nic_efficiency = 0.94;  // 47 of 50 GB/s per NDR NIC (nccl-tests issues 267, 290)
  double nic_latency_s = 5e-6;
  double oversubscription = 1.0;
  bool nvlink_ingress = true;
  int host_cores = 0;
  bool comm_priority = true;
  GpuSpec gpu;
  bool operator==(const PlatformSpec&) const = default;

  std::int64_t gpus() const { return std::int64_t{nodes} * gpus_per_node; }
  double nvlink_effective() const { return nvlink_bytes_per_s * nvlink_efficiency; }
  double nic_effective() const { return nic_bytes_per_s * nic_efficiency; }
};

// Most GPUs one platform may describe (nodes x gpus_per_node), the plan's rank limit.
inline constexpr std::int64_t kMaxPlatformGpus = std::int64_t{1} << 20;
// Most GPUs and cluster nodes one replay builds on a preset platform (the nodes its flows touch;
// a folded replay of a large world touches few). SimGrid checks each new host's and link's name
// against every zone already built, so building costs nodes x GPUs: at these limits about 15 s.
inline constexpr std::int64_t kMaxSimulatedGpus = 16384;
inline constexpr std::int64_t kMaxSimulatedNodes = 2048;

std::vector<std::string> preset_names();
// Throws SimError(BadPlatform) for an unknown preset.
PlatformSpec preset(std::string_view name);
// Parses the text form above. Throws SimError(BadPlatform) naming the offending key or value.
PlatformSpec parse_platform(std::string_view text);
// Applies one key=value override (the keys of the text form). Throws SimError(BadPlatform).
void set_platform_key(PlatformSpec& spec, std::string_view key, std::string_view value);
std::vector<std::string> platform_keys();
// Returns spec with nodes filled in for a plan over `world` ranks; throws SimError(BadPlatform)
// when a fixed size is too small.
PlatformSpec sized_for(PlatformSpec spec, int world);
// One line per spec-sheet entry, in the units of the text form.
std::string describe(const PlatformSpec& spec);

}  // namespace ht::sim
