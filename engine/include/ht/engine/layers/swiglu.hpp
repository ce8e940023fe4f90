// SwiGLU MLP: the dense '-' layer's branch, every MoE expert and the shared expert.
// x (n, C), fc1 (2F, C) whose first F output rows are the gate and last F the up projection
// (Megatron's chunk order), fc2 (C, F): y (n, C) = fc2( silu(x fc1_gate^T) * (x fc1_up^T) ).
// The pointer form works on any row block, which is how experts run on their permuted tokens.
#pragma once

#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
struct SwiGLUWeights {
  Tensor<T> fc1;  // (2F, C)
  Tensor<T> fc2;  // (C, F)
  template <class Self, class F>
  static void visit(Self& self, F&& f, const std::string& prefix) {
    f(prefix + "linear_fc1.weight", self.fc1);
    f(prefix + "linear_fc2.weight", self.fc2);
  }
};

template <class T>
struct SwiGLUCache {
  std::vector<T> h;    // (n, 2F) fc1 output
  std::vector<T> act;  // (n, F)  silu(gate) * up, the fc2 input
};

template <class T>
void swiglu_init(SwiGLUWeights<T>& w, int c, int f, T std, Rng& rng);
// y (n, C) is overwritten.
template <class T>
void swiglu_forward(T* y, SwiGLUCache<T>& cache, const T* x, int n, const SwiGLUWeights<T>& w);
// dx (n, C) and the weight grads accumulate; with `wgrad` the fc2 and fc1 weight GEMMs go to the
// sink (in that order).
template <class T>
void swiglu_backward(T* dx, SwiGLUWeights<T>& grads, const T* dy, const T* x, int n,
                     const SwiGLUWeights<T>& w, const SwiGLUCache<T>& cache,
                     WgradSink<T>* wgrad = nullptr);

// The dense '-' layer branch (the model owns "mlp.linear_fc1.layer_norm_weight" and the residual).
// inp, out (B, T, C).
template <class T>
struct MlpParams {
  SwiGLUWeights<T> w;
  template <class Self, class F>
  static void visit(Self& self, F&& f) {
    SwiGLUWeights<T>::visit(self.w, f, "mlp.");
  }
};
template <class T>
struct MlpCache {
  SwiGLUCache<T> inner;
};
template <class T>
void mlp_init(MlpParams<T>& p, const ModelConfig& cfg, Rng& rng);
template <class T>
void mlp_forward(const ModelConfig& cfg, const MlpParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MlpCache<T>& cache);
template <class T>
void mlp_backward(const ModelConfig& cfg, const MlpParams<T>& p, const MlpCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp, MlpParams<T>& grads,
                  WgradSink<T>* wgrad = nullptr);

}  // namespace ht::engine
