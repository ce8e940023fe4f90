// Mamba2 mixer, the branch of 'M': forward and hand-written backward of the sequence mixer only.
// The model owns the pre-norm ("mixer.in_proj.layer_norm_weight": Megatron fuses it into in_proj,
// here it is RMSNorm then in_proj) and the residual add. Reference: megatron-hybrid.md 5.1.
// inp, out (B, T, C). H heads of P channels (d_inner = H P), N state size, G groups, K conv.
//
//   zxbcdt = inp W_in^T               split as z (d_inner) | xBC (conv_dim) | dt (H)
//   xBC    = silu(causal_depthwise_conv(xBC) + conv_bias), split as x (d_inner) | B (G N) | C (G N)
//   dt     = softplus(dt + dt_bias),  A = -exp(A_log)                     (per head)
//   h_t    = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T      h is (P, N) per head, h_0 = 0
//   y_t    = h_t C_t + D x_t
//   normed = rmsnorm_per_group(y * silu(z)) * norm_weight
//   out    = normed W_out^T
//
// Gated norm, stated precisely: Mamba2's RMSNormGated with norm_before_gate=False (the flag
// Megatron asserts) multiplies by silu(z) FIRST and normalises the product; the mean of squares
// runs over groups of d_inner/G consecutive channels (Megatron builds that norm with
// group_size = d_inner / ngroups), eps = cfg.norm_eps. Head h reads B and C of group h/(H/G).
// The scan is sequential in time; the chunked SSD scan computes the same recurrence.
#pragma once

#include <cstddef>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

// The dimensions of one Mamba2 mixer, read from ModelConfig's mamba_* fields.
struct Mamba2Dims {
  int d_model = 0;  // C
  int nheads = 0;   // H
  int headdim = 0;  // P
  int d_state = 0;  // N
  int ngroups = 1;  // G
  int d_conv = 4;   // K

  static Mamba2Dims from(const ModelConfig& cfg);  // validates; std::invalid_argument if bad
  int d_inner() const { return nheads * headdim; }
  int conv_dim() const { return d_inner() + 2 * ngroups * d_state; }
  int in_proj_dim() const { return 2 * d_inner() + 2 * ngroups * d_state + nheads; }
};

template <class T>
struct Mamba2Params {
  Tensor<T> in_proj;      // (in_proj_dim, C)
  Tensor<T> conv_weight;  // (conv_dim, K): Megatron's (conv_dim, 1, K) bytes
  Tensor<T> conv_bias;    // (conv_dim)
  Tensor<T> dt_bias;      // (H)
  Tensor<T> A_log;        // (H)
  Tensor<T> D;            // (H)
  Tensor<T> norm;         // (d_inner) gated-norm weight
  Tensor<T> out_proj;     // (C, d_inner)
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    f("mixer.in_proj.weight", self.in_proj);
    f("mixer.conv1d.weight", self.conv_weight);
    f("mixer.conv1d.bias", self.conv_bias);
    f("mixer.dt_bias", self.dt_bias);
    f("mixer.A_log", self.A_log);
    f("mixer.D", self.D);
    f("mixer.norm.weight", self.norm);
    f("mixer.out_proj.weight", self.out_proj);
  }
};

// What backward needs, named. The scan states are not cached: backward recomputes them per
// (sequence, head), since T+1 states of P*N per head would dominate the memory.
template <class T>
struct Mamba2Cache {
  Tensor<T> zxbcdt;   // (B, T, in_proj_dim) in_proj output: z | xBC (pre-conv) | dt (pre-softplus)
  Tensor<T> xbc_pre;  // (B, T, conv_dim) conv output before SiLU
  Tensor<T> xbc;      // (B, T, conv_dim) after SiLU: the scan's x | B | C
  Tensor<T> dt;       // (B, T, H) softplus(dt + dt_bias)
  Tensor<T> y;        // (B, T, d_inner) scan output before the gate
  Tensor<T> rstd;     // (B, T, G) gated-norm reciprocal RMS
  Tensor<T> normed;   // (B, T, d_inner) out_proj input
};

std::size_t mamba2_param_count(const ModelConfig& cfg);

// Allocates and fills p: in_proj/out_proj normal(0, init_std), conv weight and bias
// uniform(+-1/sqrt(K)), dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 0.1],
// A_log = log U[1, 16], D = 1, norm = 1.
template <class T>
void mamba2_init(Mamba2Params<T>& p, const ModelConfig& cfg, Rng& rng);
// out is resized and overwritten; cache is refilled.
template <class T>
void mamba2_forward(const ModelConfig& cfg, const Mamba2Params<T>& p, const Tensor<T>& inp,
                    Tensor<T>& out, Mamba2Cache<T>& cache);
// dinp and grads accumulate (+=). With `wgrad` the weight GEMMs of in_proj and out_proj go to
// the sink; the recurrence-born gradients (conv1d weight and bias, dt_bias, A_log, D, the gated
// norm) are computed here.
template <class T>
void mamba2_backward(const ModelConfig& cfg, const Mamba2Params<T>& p, const Mamba2Cache<T>& cache,
                     const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                     Mamba2Params<T>& grads, WgradSink<T>* wgrad = nullptr);

}  // namespace ht::engine
