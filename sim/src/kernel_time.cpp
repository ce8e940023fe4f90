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

// Hopper/Blackwell BF16 GEMM tiles cuBLAS chooses among (cuBLASLt MatmulTile; CUTLASS sm90
// examples: 64-row warpgroup MMAs, two consumer warpgroups per 128-row tile). The 64-row tiles,
// one warpgroup's worth, only serve GEMMs of at most 64 rows: with more rows the larger tiles'
// data reuse wins, which the tile efficiency below does not model per shape.
constexpr std::array<std::array<double, 2>, 3> kTiles{{{128, 256}, {256, 128}, {128, 128}}};
constexpr std::array<std::array<double, 2>, 2> kSkinnyTiles{{{64, 256}, {64, 128}}};

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

double gemm_seconds(double m, double n, double k, double groups, double bytes, const GpuSpec& gpu) {
  if (m <= 0 || n <= 0 || k <= 0 || groups <= 0) return memory_seconds(bytes, gpu);
  const double per_sm = gpu.peak_flops / gpu.sms * gpu.gemm_efficiency;
  double best = std::numeric_limits<double>::infinity();
  auto consider = [&](double tm, double tn) {
    // Tile quantisation (ceil) and wave quantisation (ceil over the SMs).
    const double tiles = groups * std::ceil(m / tm) * std::ceil(n / tn);
    const double waves = std::ceil(tiles / gpu.sms);
    best = std::min(best, waves * 2 * tm * tn * (k + gpu.gemm_tile_overhead_k) / per_sm);
  };
  for (const auto& [tm, tn] : kTiles) consider(tm, tn);
  if (m <= 64)
    for (const auto& [tm, tn] : kSkinnyTiles) consider(tm, tn);
  return std::max(best, memory_seconds(bytes, gpu));
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

double kernel_seconds(const Kernel& kn, Phase phase, bool delay_wgrad, const GpuSpec& gpu) {
  const bool backward = phase == Phase::Backward;
  if (phase == Phase::Weight && !(kn.delayable && (kn.kind == KernelKind::Gemm || kn.kind == KernelKind::GroupedGemm)))
    return 0;
  switch (kn.kind) {
    case KernelKind::Gemm:
    case KernelKind::GroupedGemm: {
      // Forward (m x k)(k x n); data gradient (m x n)(n x k); weight gradient (k x m)(m x n), per group.
      const double forward = gemm_seconds(kn.m, kn.n, kn.k, kn.groups, kn.bytes, gpu);
      const double dgrad = gemm_seconds(kn.m, kn.k, kn.n, kn.groups, kn.bytes, gpu);
      const double wgrad = gemm_seconds(kn.k, kn.n, kn.m, kn.groups, kn.bytes, gpu);
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
    case KernelKind::Elementwise: {
      const double factor = backward ? 2 : 1;
      return factor * std::max(kn.flops / gpu.peak_flops, memory_seconds(kn.bytes, gpu));
    }
  }
  return 0;
}

double work_seconds(const schedule::Work& work, Phase phase, bool delay_wgrad, const GpuSpec& gpu) {
  double total = 0;
  for (const Kernel& k : work.kernels) total += kernel_seconds(k, phase, delay_wgrad, gpu);
  return total;
}

}  // namespace ht::sim
