// The physical kernel model of compute nodes (cost_model.hpp): every kernel of a node's work timed
// from its shape on the GPU's spec sheet. Constants and their sources: platform.hpp and
// docs/twin.md ("Cost model"). Nothing here is fitted to a model's step time.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "ht/sim/cost_model.hpp"

namespace ht::sim {

using schedule::Kernel;
using schedule::KernelKind;
using schedule::Phase;

namespace {

// Measured BF16 GEMM throughput on sm_90 (H100 class), TFLOP/s, for (m x k)(k x n) with m, n, k
// each in {256, 512, 1024, 2048, 4096}: OpenXLA's matmul interpolation table
// (xla/service/gpu/model/matmul_interpolator_data.h, "sm_90" entries with batch 1, bf16 x bf16 ->
// bf16; the revision in ROCm/xla@ea2c45f, 2026-07-31). Each figure is a whole kernel's achieved
// rate, so the launch latency and tile and wave quantisation of small shapes are in it (a 256^3
// GEMM: 6.7 TFLOP/s, i.e. 5 us). Indexed [m][n][k] by log2(size / 256).
constexpr int kGrid = 5;
constexpr double kSm90Tflops[kGrid * kGrid][kGrid] = {
    {6.7, 11.5, 18.9, 31.9, 90.9},  // m 256, n 256
    {12.4, 23.0, 41.1, 63.9, 93.1},  // m 256, n 512
    {23.7, 43.8, 75.1, 119.6, 177.1},  // m 256, n 1024
    {43.8, 83.1, 141.6, 222.6, 296.3},  // m 256, n 2048
    {82.6, 146.2, 237.6, 345.9, 418.4},  // m 256, n 4096
    {12.3, 23.0, 41.5, 61.7, 92.8},  // m 512, n 256
    {23.6, 43.6, 73.4, 116.3, 187.5},  // m 512, n 512
    {45.7, 85.4, 146.5, 231.0, 300.9},  // m 512, n 1024
    {84.5, 147.5, 241.8, 342.8, 460.4},  // m 512, n 2048
    {141.3, 243.6, 381.3, 530.0, 661.6},  // m 512, n 4096
    {23.6, 43.7, 69.8, 116.1, 187.2},  // m 1024, n 256
    {45.5, 84.3, 144.0, 235.5, 312.1},  // m 1024, n 512
    {80.9, 149.1, 252.8, 359.8, 472.6},  // m 1024, n 1024
    {144.3, 244.0, 384.0, 529.5, 665.7},  // m 1024, n 2048
    {219.7, 347.7, 494.4, 639.1, 751.9},  // m 1024, n 4096
    {45.3, 79.0, 142.8, 231.4, 333.9},  // m 2048, n 256
    {84.3, 150.1, 257.6, 354.1, 458.1},  // m 2048, n 512
    {145.6, 244.9, 386.8, 535.3, 663.6},  // m 2048, n 1024
    {219.7, 348.6, 498.0, 641.0, 752.2},  // m 2048, n 2048
    {303.3, 449.3, 596.5, 725.5, 752.3},  // m 2048, n 4096
    {84.5, 144.9, 229.0, 314.3, 398.9},  // m 4096, n 256
    {141.9, 240.1, 377.5, 531.0, 662.0},  // m 4096, n 512
    {223.0, 354.6, 497.6, 643.7, 751.7},  // m 4096, n 1024
    {308.2, 449.6, 604.6, 727.5, 759.4},  // m 4096, n 2048
    {398.6, 551.8, 685.2, 735.6, 780.2},  // m 4096, n 4096
};
// The spec-sheet peak those figures were measured against (H100/H200 SXM dense BF16) and the best
// large-shape fraction of it cuBLAS reaches there (794.5 of 989, Bekman's MAMF table): another
// GPU's rate is the table's fraction of its own peak times its own best fraction over this one.
constexpr double kSm90PeakTflops = 989;
constexpr double kSm90BestFraction = 0.803;

// Transformer Engine's GroupedLinear on Hopper runs one cuBLAS GEMM per expert, spread over this many
// compute streams (TE transformer_engine/common/util/multi_stream.cpp; physics.md 1.4).
constexpr double kGroupedGemmStreams = 4;

// FlashAttention-3 on H100 (Shah et al. 2024, figures transcribed in docs/twin.md): achieved
// fraction of the dense BF16 peak at sequence length 512 * 2^i, head dim 128.
constexpr std::array<double, 6> kCausalForward{0.30, 0.43, 0.53, 0.59, 0.61, 0.62};
constexpr std::array<double, 6> kFullForward{0.47, 0.57, 0.63, 0.645, 0.65, 0.655};
constexpr std::array<double, 6> kFullBackward{0.32, 0.43, 0.51, 0.55, 0.565, 0.57};

double interpolate(const std::array<double, 6>& table, double seq) {
  const double x = std::clamp(std::log2(std::max(seq, 1.0) / 512.0), 0.0, 5.0);
  const auto i = static_cast<std::size_t>(std::min(4.0, std::floor(x)));
  const double f = x - static_cast<double>(i);
  return table[i] * (1 - f) + table[i + 1] * f;
}

double memory_seconds(double bytes, const GpuSpec& gpu) {
  return bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency);
}

}  // namespace

namespace {

// Trilinear interpolation of a grid of GEMM rates (TFLOP/s at sizes^3 shapes, index
// (im * n + in) * n + ik) in log2 of each size. Sizes beyond the grid take its edge: above it a
// GEMM runs at the edge rate (the large-shape plateau: 780 of MAMF's 794.5 TFLOP/s at 4096 in
// the built-in table); below it, it takes as long as the smallest GEMM (one row of tiles; the
// kernel's latency), so the rate falls in proportion.
template <class Rate>
double interpolate_grid(double m, double n, double k, const std::vector<double>& sizes, Rate rate) {
  const std::size_t g = sizes.size();
  double frac[3], scale = 1;
  std::size_t lo[3];
  const double dims[3] = {m, n, k};
  for (int i = 0; i < 3; ++i) {
    const double d = std::max(dims[i], 1.0);
    if (d < sizes.front()) scale *= d / sizes.front();
    const double x = std::clamp(d, sizes.front(), sizes.back());
    std::size_t at = 0;
    while (at + 2 < g && x >= sizes[at + 1]) ++at;
    lo[i] = at;
    frac[i] = std::clamp(std::log2(x / sizes[at]) / std::log2(sizes[at + 1] / sizes[at]), 0.0, 1.0);
  }
  double tflops = 0;
  for (int c = 0; c < 8; ++c) {
    double w = 1;
    std::size_t at[3];
    for (int i = 0; i < 3; ++i) {
      const int up = (c >> i) & 1;
      at[i] = lo[i] + static_cast<std::size_t>(up);
      w *= up ? frac[i] : 1 - frac[i];
    }
    if (w > 0) tflops += w * rate((at[0] * g + at[1]) * g + at[2]);
  }
  return scale * tflops * 1e12;
}

const std::vector<double> kSm90Sizes{256, 512, 1024, 2048, 4096};

}  // namespace

namespace {

// A GEMM's rate and time; `sustained`: at the measured table's sustained fraction (what a step
// pays), else at the burst rates the table holds (what its grouped GEMMs were measured against).
double rate_at(double m, double n, double k, const GpuSpec& gpu, bool fp8, bool sustained) {
  const double peak = fp8 ? gpu.fp8_peak_flops : gpu.peak_flops;
  const double best = fp8 ? gpu.fp8_gemm_efficiency : gpu.gemm_efficiency;
  if (gpu.measured) {
    // The GPU's own BF16 table (calibrate --gpu): its rates as measured; FP8 at the FP8 peak and
    // best fraction over the BF16 ones.
    const auto& t = *gpu.measured;
    const double held = sustained && t.sustained_fraction > 0 ? std::min(1.0, t.sustained_fraction) : 1.0;
    const double bf16 = held * interpolate_grid(m, n, k, t.sizes, [&](std::size_t i) { return t.gemm_bf16_tflops[i]; });
    return fp8 ? bf16 * (peak * best) / (gpu.peak_flops * gpu.gemm_efficiency) : bf16;
  }
  const double sm90 = interpolate_grid(m, n, k, kSm90Sizes, [](std::size_t i) { return kSm90Tflops[i / kGrid][i % kGrid]; });
  return sm90 / (kSm90PeakTflops * 1e12) * peak * (best / kSm90BestFraction);
}

double seconds_at(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu, bool fp8,
                  bool sustained) {
  if (m <= 0 || n <= 0 || k <= 0 || groups <= 0) return memory_seconds(bytes, gpu);
  const double one = 2 * m * n * k / rate_at(m, n, k, gpu, fp8, sustained);
  double seconds = one;
  if (groups > 1) {
    // One GEMM per group on up to kGroupedGemmStreams streams: they run side by side while
    // their tiles (128 x 128) fit on the SMs together, and never beat one GEMM of all the rows.
    const double tiles = std::ceil(m / 128) * std::ceil(n / 128);
    const double side_by_side = std::clamp(std::floor(gpu.sms / tiles), 1.0, std::min(kGroupedGemmStreams, groups));
    const double fused = 2 * m * groups * n * k / rate_at(m * groups, n, k, gpu, fp8, sustained);
    seconds = std::max(groups * one / side_by_side, fused);
  }
  return std::max(seconds, memory_seconds(bytes, gpu));
}

}  // namespace

double gemm_rate(double m, double n, double k, const GpuSpec& gpu, bool fp8) {
  return rate_at(m, n, k, gpu, fp8, true);
}

double gemm_seconds(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu, bool fp8) {
  return seconds_at(m, n, k, groups, bytes, gpu, fp8, true);
}

double gemm_seconds_burst(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu) {
  return seconds_at(m, n, k, groups, bytes, gpu, false, false);
}

namespace {

// Where x sits on an ascending axis: the cell's lower index and the fraction to the next, in log2,
// clamped to the axis (one point: index 0, fraction 0).
void locate(const std::vector<double>& axis, double x, std::size_t& lo, double& frac) {
  lo = 0;
  frac = 0;
  if (axis.size() < 2) return;
  const double at = std::clamp(x, axis.front(), axis.back());
  while (lo + 2 < axis.size() && at >= axis[lo + 1]) ++lo;
  frac = std::clamp(std::log2(at / axis[lo]) / std::log2(axis[lo + 1] / axis[lo]), 0.0, 1.0);
}

}  // namespace

double grouped_correction(double rows, double groups, double k, double n, const GpuSpec& gpu) {
  if (!gpu.measured || gpu.measured->grouped_seconds.empty() || groups <= 1 || rows <= 0 || k <= 0 || n <= 0) return 1;
  const MeasuredKernels& t = *gpu.measured;
  // The measured (k, n) nearest the kernel's in log2.
  std::size_t shape = 0;
  double nearest = 1e300;
  for (std::size_t i = 0; i < t.grouped_shapes.size(); ++i) {
    const double dk = std::log2(k / t.grouped_shapes[i].first), dn = std::log2(n / t.grouped_shapes[i].second);
    if (dk * dk + dn * dn < nearest) {
      nearest = dk * dk + dn * dn;
      shape = i;
    }
  }
  const double mk = t.grouped_shapes[shape].first, mn = t.grouped_shapes[shape].second;
  // Measured over this model's rule (gemm_seconds on the same table) at one grid point.
  auto ratio = [&](std::size_t ie, std::size_t ir) {
    const double g = t.grouped_experts[ie], m = t.grouped_rows[ir];
    const double bytes = 2 * (g * mk * mn + g * m * (mk + mn));
    // Against the rule at the table's burst rates, as the groups were measured: the price, this
    // ratio times the rule at the sustained rates, is then the measured time at the sustained rate.
    const double rule = gemm_seconds_burst(m, mn, mk, g, bytes, gpu);
    return t.grouped_seconds[(ie * t.grouped_rows.size() + ir) * t.grouped_shapes.size() + shape] / rule;
  };
  std::size_t e0 = 0, r0 = 0;
  double fe = 0, fr = 0;
  locate(t.grouped_experts, groups, e0, fe);
  locate(t.grouped_rows, rows, r0, fr);
  const std::size_t e1 = std::min(e0 + 1, t.grouped_experts.size() - 1),
                    r1 = std::min(r0 + 1, t.grouped_rows.size() - 1);
  return (1 - fe) * ((1 - fr) * ratio(e0, r0) + fr * ratio(e0, r1)) +
         fe * ((1 - fr) * ratio(e1, r0) + fr * ratio(e1, r1));
}

double delta_rule_rate(double chains, const GpuSpec& gpu) {
  // FLA's Triton forward on an H100 (flashinfer PRs 3866 and 3788, d = 128, FLOPs counted as
  // 6 N Hv dk dv): 8 chains 26.4 TFLOP/s (1 x 65536 tokens, 1.954 ms), 64 chains 47.6 (the slope
  // between 1 x 8192 and 1 x 65536: 1.045 and 8.633 ms), 1024 chains 45.6 (32 x 8192, 18.08 ms):
  // log2-interpolated between 8 and 64 chains, flat beyond.
  const double x = std::clamp(std::log2(std::max(chains, 1.0) / 8) / 3, 0.0, 1.0);
  return (kDeltaRuleTflops8 + x * (kDeltaRuleTflops64 - kDeltaRuleTflops8)) * 1e12 * gpu.delta_rule_scale;
}

double attention_efficiency(double seq, double head_dim, bool backward, const GpuSpec& gpu) {
  double eff = backward ? interpolate(kFullBackward, seq) * interpolate(kCausalForward, seq) /
                              interpolate(kFullForward, seq)
                        : interpolate(kCausalForward, seq);
  // Head size: FA3's 64 reaches 0.77 of its 128 figures, 256 reaches 1.04 (causal).
  if (head_dim <= 64) eff *= 0.77;
  else if (head_dim >= 256) eff *= 1.04;
  else if (head_dim > 128) eff *= 1.0 + 0.04 * (head_dim - 128) / 128;
  else if (head_dim < 128) eff *= 0.77 + 0.23 * (head_dim - 64) / 64;
  return std::min(1.0, eff * gpu.attention_scale);
}

double wgrad_bytes(const Kernel& kn, double bytes) {
  const double groups = std::max(1.0, kn.groups), weights = groups * kn.k * kn.n;
  const double elements = weights + groups * kn.m * (kn.k + kn.n);
  if (elements <= 0 || bytes <= 0) return bytes;
  return bytes + weights * (kMainGradAccumulateBytes - bytes / elements);
}

double kernel_seconds(const Kernel& kn, Phase phase, bool delay_wgrad, const GpuSpec& gpu) {
  const bool backward = phase == Phase::Backward;
  if (phase == Phase::Weight && !(kn.delayable && (kn.kind == KernelKind::Gemm || kn.kind == KernelKind::GroupedGemm)))
    return 0;
  switch (kn.kind) {
    case KernelKind::Gemm:
    case KernelKind::GroupedGemm: {
      // Forward (m x k)(k x n); data gradient (m x n)(n x k); weight gradient (k x m)(m x n), per group.
      // FP8 moves one byte an element where BF16 moves two.
      const double bytes = kn.fp8 ? kn.bytes / 2 : kn.bytes;
      // A measured table's grouped GEMMs correct the rule by what the GPU did at the measured
      // forward shapes; the data and weight gradients take the same ratio.
      const double measured =
          kn.kind == KernelKind::GroupedGemm ? grouped_correction(kn.m, kn.groups, kn.k, kn.n, gpu) : 1;
      const double forward = measured * gemm_seconds(kn.m, kn.n, kn.k, kn.groups, bytes, gpu, kn.fp8);
      const double dgrad = measured * gemm_seconds(kn.m, kn.k, kn.n, kn.groups, bytes, gpu, kn.fp8);
      const double wgrad = measured * gemm_seconds(kn.k, kn.n, kn.m, kn.groups, wgrad_bytes(kn, bytes), gpu, kn.fp8);
      if (phase == Phase::Weight) return wgrad;
      if (!backward) return forward;
      return dgrad + (delay_wgrad && kn.delayable ? 0.0 : wgrad);
    }
    case KernelKind::Attention: {
      // m = queries, n = keys attended on average (causal: about half the sequence), k = head size.
      // The backward does 2.5x the forward's FLOPs (it recomputes the scores), FA's convention.
      const double seq = std::max(1.0, 2 * kn.n);
      const double flops = (backward ? 2.5 : 1.0) * kn.flops;
      const double math = flops / (gpu.peak_flops * attention_efficiency(seq, kn.k > 0 ? kn.k : 128, backward, gpu));
      return std::max(math, (backward ? 2 : 1) * memory_seconds(kn.bytes, gpu));
    }
    case KernelKind::Scan: {
      const double factor = backward ? 2 : 1;
      return factor * std::max(kn.flops / (gpu.peak_flops * gpu.scan_efficiency), memory_seconds(kn.bytes, gpu));
    }
    case KernelKind::DeltaRule: {
      // FLA's chunked gated delta rule is bound by its chunk-to-chunk recurrence, not by peak or
      // HBM: its rate depends on how many independent chains (sequence x value head) fill the SMs.
      const double forward = std::max(kn.flops / delta_rule_rate(kn.n, gpu), memory_seconds(kn.bytes, gpu));
      return backward ? kDeltaRuleBackward * forward : forward;
    }
    case KernelKind::Elementwise: {
      const double factor = backward ? 2 : 1;
      return factor * std::max(kn.flops / gpu.peak_flops, memory_seconds(kn.bytes, gpu));
    }
    case KernelKind::Permute:
      // Indexed row gathers and scatters reach a fraction of HBM (physics.md 1.6); the backward
      // is the mirror permutation.
      return kn.bytes / (gpu.hbm_bytes_per_s * gpu.permute_efficiency);
    case KernelKind::HostCopy:
      return 0;  // the copy engines, not the SMs: CostModel::compute_seconds takes the longer
  }
  return 0;
}

int kernel_launches(const Kernel& kn, Phase phase, bool delay_wgrad) {
  const bool gemm = kn.kind == KernelKind::Gemm || kn.kind == KernelKind::GroupedGemm;
  const int groups = kn.kind == KernelKind::GroupedGemm ? static_cast<int>(std::max(1.0, kn.groups)) : 1;
  const bool delta = kn.kind == KernelKind::DeltaRule;
  if (kn.kind == KernelKind::HostCopy)  // one copy call each way, none in a recompute or W node
    return phase == Phase::Forward || phase == Phase::Backward ? 1 : 0;
  switch (phase) {
    case Phase::Forward:
    case Phase::Recompute: return delta ? kDeltaRuleForwardLaunches : groups;
    case Phase::Weight: return gemm && kn.delayable ? groups : 0;
    case Phase::Backward:
      if (gemm) return groups * (delay_wgrad && kn.delayable ? 1 : 2);
      if (delta) return kDeltaRuleBackwardLaunches;
      return kn.kind == KernelKind::Attention ? 3 : 1;
  }
  return 0;
}

double work_seconds(const schedule::Work& work, Phase phase, bool delay_wgrad, const GpuSpec& gpu) {
  double total = 0;
  for (const Kernel& k : work.kernels) total += kernel_seconds(k, phase, delay_wgrad, gpu);
  return total;
}

}  // namespace ht::sim
