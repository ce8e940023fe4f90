// Mixture of experts, the branch of 'E' (the model owns "pre_mlp_layernorm.weight" and the
// residual). Split into the pieces the overlap executor runs as separate schedule slots
// (reference section 3.3): route + permute (pre_dispatch), expert compute (mlp), unpermute +
// combine (combine); on one rank dispatch/combine all-to-alls are the identity.
//
// Shapes: x (N, C) normalised tokens (N = B T), E experts, k = topk, F = moe_ffn_hidden.
//   router.weight (E, C): logits (N, E) = x router^T.
//   Selection: the k largest logits per token, ties broken towards the lower expert index.
//   Combine weights w (N, k) = softmax over the k selected logits (Megatron's post-top-k softmax).
//   Permuted buffer (N k, C): rows grouped by expert (expert 0 first), tokens in order within an
//   expert; dropless (no capacity, no token is dropped).
//   y_x = sum_j w_{x,j} expert_{e(x,j)}(x) [+ shared_expert(x)], summed j = 0..k-1.
// Losses (s = loss_scale, 1 in the trunk and 1/depths inside MTP, reference 5.1):
//   aux = s E coeff_aux / (k N^2) sum_i (sum_x p_{x,i}) tokens_i   with p = softmax(logits) over
//         all experts and tokens_i the tokens routed to expert i (switch load balancing),
//   z   = s coeff_z mean_x (logsumexp(logits_x))^2.
// Checkpoint names: mlp.router.weight, mlp.experts.local_experts.<i>.linear_fc{1,2}.weight,
// mlp.shared_experts.linear_fc{1,2}.weight.
#pragma once

#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
struct MoeParams {
  Tensor<T> router;                       // (E, C)
  std::vector<SwiGLUWeights<T>> experts;  // E of (2F, C), (C, F)
  bool has_shared = false;
  SwiGLUWeights<T> shared;                // (2Fs, C), (C, Fs) when has_shared
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    f(std::string("mlp.router.weight"), self.router);
    for (std::size_t i = 0; i < self.experts.size(); ++i)
      SwiGLUWeights<T>::visit(self.experts[i], f,
                              "mlp.experts.local_experts." + std::to_string(i) + ".");
    if (self.has_shared) SwiGLUWeights<T>::visit(self.shared, f, "mlp.shared_experts.");
  }
};

// Output of route + permute: everything later pieces and the backward need about the routing.
template <class T>
struct MoeRouting {
  int n = 0, e = 0, k = 0;
  Tensor<T> logits;                    // (N, E)
  Tensor<T> probs;                     // (N, E) softmax over all experts (aux loss)
  std::vector<T> lse;                  // (N) logsumexp of logits (z-loss)
  std::vector<int> topk_idx;           // (N, k) selected experts, descending logit
  std::vector<T> topk_w;               // (N, k) combine weights
  std::vector<int> tokens_per_expert;  // (E)
  std::vector<int> expert_offset;      // (E + 1) first permuted row of each expert
  std::vector<int> perm_row;           // (N, k) permuted row of (token, slot)
  std::vector<int> row_token;          // (N k) token of each permuted row
  T aux_loss = T(0);
  T z_loss = T(0);
};

template <class T>
struct MoeCache {
  MoeRouting<T> routing;
  std::vector<T> permuted_in;   // (N k, C)
  std::vector<T> permuted_out;  // (N k, C)
  std::vector<SwiGLUCache<T>> expert_caches;
  SwiGLUCache<T> shared_cache;
};

template <class T>
void moe_init(MoeParams<T>& p, const ModelConfig& cfg, Rng& rng);

// ---- pieces (forward) ----
// pre_dispatch: logits, top-k, combine weights, losses, permutation; gathers x into permuted_in.
template <class T>
void moe_route_permute(const ModelConfig& cfg, const MoeParams<T>& p, const T* x, int n,
                       T loss_scale, MoeRouting<T>& routing, std::vector<T>& permuted_in);
// mlp: each expert's SwiGLU on its row block.
template <class T>
void moe_experts_forward(const MoeParams<T>& p, const MoeRouting<T>& routing,
                         const std::vector<T>& permuted_in, std::vector<T>& permuted_out,
                         std::vector<SwiGLUCache<T>>& caches);
// combine: y (N, C) = sum_j w permuted_out[perm_row] (overwrites y).
template <class T>
void moe_unpermute_combine(const MoeRouting<T>& routing, const std::vector<T>& permuted_out,
                           T* y, int c);

// ---- pieces (backward; all outputs accumulate) ----
// dpermuted_out (N k, C) += w dy;  dw (N, k) += dy . permuted_out.
template <class T>
void moe_combine_backward(const MoeRouting<T>& routing, const std::vector<T>& permuted_out,
                          const T* dy, int c, std::vector<T>& dpermuted_out, std::vector<T>& dw);
template <class T>
void moe_experts_backward(const MoeParams<T>& p, const MoeRouting<T>& routing,
                          const std::vector<T>& permuted_in,
                          const std::vector<SwiGLUCache<T>>& caches,
                          const std::vector<T>& dpermuted_out, std::vector<T>& dpermuted_in,
                          MoeParams<T>& grads);
// dx += unpermute(dpermuted_in) + router backward of (dw, aux loss, z-loss).
template <class T>
void moe_route_permute_backward(const ModelConfig& cfg, const MoeParams<T>& p, const T* x,
                                const MoeRouting<T>& routing, T loss_scale,
                                const std::vector<T>& dpermuted_in, const std::vector<T>& dw,
                                T* dx, MoeParams<T>& grads);

// ---- whole branch: inp, out (B, T, C) ----
// aux/z losses of this call are left in cache.routing.{aux_loss, z_loss}; backward adds their
// gradient (d total loss / d aux = 1).
template <class T>
void moe_forward(const ModelConfig& cfg, const MoeParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MoeCache<T>& cache, T loss_scale);
template <class T>
void moe_backward(const ModelConfig& cfg, const MoeParams<T>& p, const MoeCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  MoeParams<T>& grads, T loss_scale);

}  // namespace ht::engine
