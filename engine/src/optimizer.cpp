// AdamW + global-norm clipping (see optimizer.hpp). Bias-corrected moments, decoupled weight
// decay: p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p).
#include "ht/engine/optimizer.hpp"

#include <cmath>

namespace ht::engine {

template <class T>
double global_grad_norm(const std::vector<ParamRef<T>>& params) {
  double ss = 0;
  for (const auto& p : params)
    for (T g : p.grad->data) ss += static_cast<double>(g) * static_cast<double>(g);
  return std::sqrt(ss);
}

template <class T>
double adamw_step(const AdamWConfig& cfg, AdamWState<T>& state, std::vector<ParamRef<T>>& params) {
  const double norm = global_grad_norm(params);
  const T clip = (cfg.clip_norm > 0 && norm > cfg.clip_norm)
                     ? static_cast<T>(cfg.clip_norm / norm)
                     : T(1);
  ++state.step;
  const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2);
  const T bc1 = T(1) - static_cast<T>(std::pow(static_cast<double>(cfg.beta1), static_cast<double>(state.step)));
  const T bc2 = T(1) - static_cast<T>(std::pow(static_cast<double>(cfg.beta2), static_cast<double>(state.step)));
  const T lr = static_cast<T>(cfg.lr), eps = static_cast<T>(cfg.eps);
  for (auto& p : params) {
    auto& m = state.exp_avg[p.canonical];
    auto& v = state.exp_avg_sq[p.canonical];
    if (m.shape != p.value->shape) m = Tensor<T>(p.value->shape);
    if (v.shape != p.value->shape) v = Tensor<T>(p.value->shape);
    const T wd = p.value->rank() >= 2 ? static_cast<T>(cfg.weight_decay) : T(0);
    for (std::size_t i = 0; i < p.value->size(); ++i) {
      const T g = (*p.grad)[i] * clip;
      m[i] = b1 * m[i] + (T(1) - b1) * g;
      v[i] = b2 * v[i] + (T(1) - b2) * g * g;
      const T mhat = m[i] / bc1, vhat = v[i] / bc2;
      (*p.value)[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * (*p.value)[i]);
    }
  }
  return norm;
}

template double global_grad_norm<float>(const std::vector<ParamRef<float>>&);
template double global_grad_norm<double>(const std::vector<ParamRef<double>>&);
template double adamw_step<float>(const AdamWConfig&, AdamWState<float>&, std::vector<ParamRef<float>>&);
template double adamw_step<double>(const AdamWConfig&, AdamWState<double>&, std::vector<ParamRef<double>>&);

}  // namespace ht::engine
