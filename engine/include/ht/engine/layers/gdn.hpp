// Gated DeltaNet mixer, the branch of 'G': forward and hand-written backward of the mixer only.
// The model owns the pre-norm ("self_attention.in_proj.layer_norm_weight") and the residual add.
// Reference: megatron-hybrid.md 5.1. inp, out (B, T, C); Hk q/k heads of dk, Hv value heads of
// dv (Hv a multiple of Hk), K conv taps.
//
//   proj  = inp W_in^T, split as
//           q (Hk dk) | k (Hk dk) | v (Hv dv) | z (Hv dv) | beta (Hv) | alpha (Hv)
//   qkv   = silu(causal_depthwise_conv(q | k | v))          (no conv bias)
//   q, k  = per-head l2norm: x / sqrt(sum x^2 + 1e-6)
//   beta  = sigmoid(beta),  g = -exp(A_log) * softplus(alpha + dt_bias)     (per value head)
//   S_t   = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T     S is (dv, dk), S_0 = 0
//   o_t   = S_t q_t / sqrt(dk)
//   gated = rmsnorm(o) * norm_weight * silu(z)      per value head over dv, weight (dv) shared
//   out   = gated W_out^T
//
// Choices, stated: q is scaled by 1/sqrt(dk) (the default scale of the chunked gated delta rule
// kernels); the output norm normalises first and gates after (GDN's gated output norm, unlike
// Mamba2's gate-then-norm); value head hv reads q/k head hv / (Hv/Hk); in_proj's output is flat
// consecutive blocks in the order above (Megatron/Qwen interleave them per key-head group; an
// importer permutes rows).
#pragma once

#include <cstddef>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

struct GdnDims {
  int d_model = 0;      // C
  int num_k_heads = 0;  // Hk
  int num_v_heads = 0;  // Hv
  int head_k_dim = 0;   // dk
  int head_v_dim = 0;   // dv
  int d_conv = 4;       // K
  static constexpr double l2_eps = 1e-6;

  static GdnDims from(const ModelConfig& cfg);  // validates; std::invalid_argument if bad
  int key_dim() const { return num_k_heads * head_k_dim; }
  int value_dim() const { return num_v_heads * head_v_dim; }
  int conv_dim() const { return 2 * key_dim() + value_dim(); }
  int in_proj_dim() const { return 2 * key_dim() + 2 * value_dim() + 2 * num_v_heads; }
};

template <class T>
struct GdnParams {
  Tensor<T> in_proj;      // (in_proj_dim, C)
  Tensor<T> conv_weight;  // (conv_dim, K)
  Tensor<T> dt_bias;      // (Hv)
  Tensor<T> A_log;        // (Hv)
  Tensor<T> out_norm;     // (dv)
  Tensor<T> out_proj;     // (C, Hv dv)
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    f("self_attention.in_proj.weight", self.in_proj);
    f("self_attention.conv1d.weight", self.conv_weight);
    f("self_attention.dt_bias", self.dt_bias);
    f("self_attention.A_log", self.A_log);
    f("self_attention.out_norm.weight", self.out_norm);
    f("self_attention.out_proj.weight", self.out_proj);
  }
};

// What backward needs, named; the delta-rule states are recomputed in backward.
template <class T>
struct GdnCache {
  Tensor<T> proj;     // (B, T, in_proj_dim) in_proj output
  Tensor<T> qkv_pre;  // (B, T, conv_dim) conv output before SiLU
  Tensor<T> qkv;      // (B, T, conv_dim) after SiLU (v is used as is)
  Tensor<T> qn;       // (B, T, Hk dk) l2-normalised q (before the 1/sqrt(dk) scale)
  Tensor<T> kn;       // (B, T, Hk dk) l2-normalised k
  Tensor<T> q_rnorm;  // (B, T, Hk) 1/sqrt(sum q^2 + eps)
  Tensor<T> k_rnorm;  // (B, T, Hk)
  Tensor<T> beta;     // (B, T, Hv) after sigmoid
  Tensor<T> g;        // (B, T, Hv) log decay
  Tensor<T> o;        // (B, T, Hv dv) delta-rule output
  Tensor<T> rstd;     // (B, T, Hv) output norm
  Tensor<T> gated;    // (B, T, Hv dv) out_proj input
};

std::size_t gdn_param_count(const ModelConfig& cfg);

// Allocates and fills p: projections normal(0, init_std), conv uniform(+-1/sqrt(K)),
// dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1], A_log = log U[1, 16], out_norm = 1.
template <class T>
void gdn_init(GdnParams<T>& p, const ModelConfig& cfg, Rng& rng);
template <class T>
void gdn_forward(const ModelConfig& cfg, const GdnParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, GdnCache<T>& cache);
// dinp and grads accumulate (+=). With `wgrad` the weight GEMMs of in_proj and out_proj go to
// the sink; the recurrence-born gradients (conv1d, dt_bias, A_log, out_norm) are computed here.
template <class T>
void gdn_backward(const ModelConfig& cfg, const GdnParams<T>& p, const GdnCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  GdnParams<T>& grads, WgradSink<T>* wgrad = nullptr);

}  // namespace ht::engine
