// Multi-head latent attention, the branch of '+': forward and hand-written backward of the
// attention mixer only. The model owns the pre-norm ("input_layernorm.weight") and the residual.
// inp, out (B, T, C); H heads; qr, kvr the q and kv latent ranks; dn the no-position q/k part,
// dr the rotary part, dv the value head dim.
//
//   cq        = inp W_qd^T                           (qr)
//   q         = (rmsnorm(cq) * q_norm) W_qu^T        per head [q_nope (dn) | q_pe (dr)]
//   ckv | kpe = inp W_kvd^T                          (kvr | dr)
//   kv        = (rmsnorm(ckv) * kv_norm) W_kvu^T     per head [k_nope (dn) | v (dv)]
//   Q = [q_nope | rope(q_pe)],  K = [k_nope | rope(kpe)]   (kpe is shared by all heads)
//   o         = softmax(Q K^T / sqrt(dn + dr), causal) V
//   out       = o W_o^T
//
// RoPE, stated: the engine's rotate-half form (math::rope_row, positions 0..T-1 of each sequence,
// cfg.rope_theta); with cfg.rope == false the dr parts enter the scores unrotated, and dr == 0
// drops them. Megatron's MLA permutes interleaved rope dims before rotating; importing its
// weights would permute the q_pe / kpe rows of W_qu / W_kvd accordingly.
// mla_q_lora_rank == 0 selects Megatron's direct query projection: q = inp W_q^T
// ("linear_q_proj.weight", (H (dn + dr), C)) with no q latent and no q norm.
#pragma once

#include <cstddef>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

struct MlaDims {
  int d_model = 0;       // C
  int nheads = 0;        // H
  int q_lora_rank = 0;   // qr (0 = direct q projection)
  int kv_lora_rank = 0;  // kvr
  int qk_head_dim = 0;   // dn
  int qk_pos_dim = 0;    // dr (even)
  int v_head_dim = 0;    // dv

  static MlaDims from(const ModelConfig& cfg);  // validates; std::invalid_argument if bad
  int qk_dim() const { return qk_head_dim + qk_pos_dim; }
  int q_up_dim() const { return nheads * qk_dim(); }
  int kv_down_dim() const { return kv_lora_rank + qk_pos_dim; }
  int kv_up_dim() const { return nheads * (qk_head_dim + v_head_dim); }
};

template <class T>
struct MlaParams {
  Tensor<T> q_proj;   // (H (dn + dr), C) only when qr == 0, else empty
  Tensor<T> q_down;   // (qr, C)          only when qr > 0, else empty
  Tensor<T> q_norm;   // (qr)
  Tensor<T> q_up;     // (H (dn + dr), qr)
  Tensor<T> kv_down;  // (kvr + dr, C)
  Tensor<T> kv_norm;  // (kvr)
  Tensor<T> kv_up;    // (H (dn + dv), kvr)
  Tensor<T> proj;     // (C, H dv)
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    if (direct_q(self)) {  // the variant is fixed by init; grads are copies of params
      f("self_attention.linear_q_proj.weight", self.q_proj);
    } else {
      f("self_attention.linear_q_down_proj.weight", self.q_down);
      f("self_attention.linear_q_up_proj.layer_norm_weight", self.q_norm);
      f("self_attention.linear_q_up_proj.weight", self.q_up);
    }
    f("self_attention.linear_kv_down_proj.weight", self.kv_down);
    f("self_attention.linear_kv_up_proj.layer_norm_weight", self.kv_norm);
    f("self_attention.linear_kv_up_proj.weight", self.kv_up);
    f("self_attention.linear_proj.weight", self.proj);
  }
};

// Which q path a parameter set holds (found by argument lookup from visit, so the device's
// pointer sets, dev/mla.hpp, answer it their own way).
template <class T>
bool direct_q(const MlaParams<T>& p) {
  return p.q_proj.rank() > 0;
}

template <class T>
struct MlaCache {
  Tensor<T> cq;       // (B, T, qr) q_down output (empty with the direct q projection)
  Tensor<T> q_rstd;   // (B, T)
  Tensor<T> cqn;      // (B, T, qr) normed, q_up input
  Tensor<T> ckv;      // (B, T, kvr + dr) kv_down output (latent | raw kpe)
  Tensor<T> kv_rstd;  // (B, T)
  Tensor<T> ckvn;     // (B, T, kvr) normed, kv_up input
  Tensor<T> Q;        // (B, T, H, dn + dr) after rope
  Tensor<T> K;        // (B, T, H, dn + dr) after rope
  Tensor<T> V;        // (B, T, H, dv)
  Tensor<T> att;      // (B, H, T, T) softmax probabilities, 0 above the diagonal
  Tensor<T> o;        // (B, T, H dv) linear_proj input
};

std::size_t mla_param_count(const ModelConfig& cfg);

// Allocates and fills p: projections normal(0, init_std), norm weights 1.
template <class T>
void mla_init(MlaParams<T>& p, const ModelConfig& cfg, Rng& rng);
template <class T>
void mla_forward(const ModelConfig& cfg, const MlaParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MlaCache<T>& cache);
// dinp and grads accumulate (+=). With `wgrad` the weight GEMMs of the projections (q or
// q_down/q_up, kv_down, kv_up, proj) go to the sink; the latent norms are computed here.
template <class T>
void mla_backward(const ModelConfig& cfg, const MlaParams<T>& p, const MlaCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  MlaParams<T>& grads, WgradSink<T>* wgrad = nullptr);

}  // namespace ht::engine
