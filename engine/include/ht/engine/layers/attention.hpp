// Causal self-attention, the branch of '*' (full causal) and 'W' (sliding window): GQA with
// optional rotary embedding. The model owns the pre-norm ("self_attention.linear_qkv.
// layer_norm_weight") and the residual.
// inp, out (B, T, C). H = num_heads, G = num_kv_heads (H % G == 0), D = head_dim.
// linear_qkv.weight ((H + 2G) D, C) in Megatron's per-group order: for each kv group g the rows
//   [q heads g*H/G .. (g+1)*H/G - 1, then k_g, then v_g], each D rows.
// linear_proj.weight (C, H D). Scores are scaled by 1/sqrt(D). RoPE (rotate-half, positions
// 0..T-1 of each sequence) is applied to q and k when cfg.rope. window > 0 limits query t to keys
// t-window+1 .. t ('W'); window == 0 is full causal ('*').
#pragma once

#include "ht/engine/config.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
struct AttentionParams {
  Tensor<T> qkv;   // ((H + 2G) D, C)
  Tensor<T> proj;  // (C, H D)
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    f("self_attention.linear_qkv.weight", self.qkv);
    f("self_attention.linear_proj.weight", self.proj);
  }
};

template <class T>
struct AttentionCache {
  Tensor<T> q;    // (B, H, T, D) after RoPE
  Tensor<T> k;    // (B, G, T, D) after RoPE
  Tensor<T> v;    // (B, G, T, D)
  Tensor<T> att;  // (B, H, T, T) softmax probabilities, 0 outside the causal window
  Tensor<T> o;    // (B, T, H D) attention output before linear_proj
};

template <class T>
void attention_init(AttentionParams<T>& p, const ModelConfig& cfg, Rng& rng);
template <class T>
void attention_forward(const ModelConfig& cfg, const AttentionParams<T>& p, const Tensor<T>& inp,
                       Tensor<T>& out, AttentionCache<T>& cache, int window);
// dinp and grads accumulate (+=); with `wgrad` the GEMMs of qkv and proj go to the sink.
template <class T>
void attention_backward(const ModelConfig& cfg, const AttentionParams<T>& p,
                        const AttentionCache<T>& cache, const Tensor<T>& inp,
                        const Tensor<T>& dout, Tensor<T>& dinp, AttentionParams<T>& grads,
                        int window, WgradSink<T>* wgrad = nullptr);

}  // namespace ht::engine
