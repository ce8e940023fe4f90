// AdamW with global-norm gradient clipping: the update the train loop applies after backward.
// State is keyed by the parameters' canonical (pattern-independent) names, so a checkpoint of a
// grouped model resumes the flattened model with the same moments and vice versa.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ht/engine/model.hpp"

namespace ht::engine {

struct AdamWConfig {
  float lr = 3e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; applied to matrices (rank >= 2) only, not norms
  float clip_norm = 1.0f;     // global L2 norm bound; <= 0 disables clipping
};

template <class T>
struct AdamWState {
  std::int64_t step = 0;
  std::map<std::string, Tensor<T>> exp_avg;     // by canonical name
  std::map<std::string, Tensor<T>> exp_avg_sq;  // by canonical name
};

// L2 norm of all gradients, accumulated in double in the parameters' order (fixed order).
template <class T>
double global_grad_norm(const std::vector<ParamRef<T>>& params);

// One AdamW step over params (values updated in place from their grads). Returns the global
// gradient norm before clipping.
template <class T>
double adamw_step(const AdamWConfig& cfg, AdamWState<T>& state, std::vector<ParamRef<T>>& params);

}  // namespace ht::engine
