// CPU reference SwiGLU MLP (see swiglu.hpp for shapes).
#include "ht/engine/layers/swiglu.hpp"

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"
#include "ht/engine/rng.hpp"

namespace ht::engine {

template <class T>
void swiglu_init(SwiGLUWeights<T>& w, int c, int f, T std, Rng& rng) {
  w.fc1 = Tensor<T>({2 * f, c});
  w.fc2 = Tensor<T>({c, f});
  for (auto& v : w.fc1.data) v = static_cast<T>(rng.normal()) * std;
  for (auto& v : w.fc2.data) v = static_cast<T>(rng.normal()) * std;
}

template <class T>
void swiglu_forward(T* y, SwiGLUCache<T>& cache, const T* x, int n, const SwiGLUWeights<T>& w) {
  const int c = w.fc1.dim(1), f = w.fc2.dim(1);
  // Both are overwritten in full below (no accumulation), so no zero fill; the capacity of the
  // previous step is reused.
  cache.h.resize(static_cast<std::size_t>(n) * 2 * f);
  cache.act.resize(static_cast<std::size_t>(n) * f);
  if (n == 0) return;
  cpu::linear_forward<T>(cache.h.data(), x, w.fc1.ptr(), nullptr, n, c, 2 * f);
  for (int i = 0; i < n; ++i) {
    const T* h = cache.h.data() + static_cast<long>(i) * 2 * f;
    T* a = cache.act.data() + static_cast<long>(i) * f;
    for (int j = 0; j < f; ++j) a[j] = math::silu(h[j]) * h[f + j];
  }
  cpu::linear_forward<T>(y, cache.act.data(), w.fc2.ptr(), nullptr, n, f, c);
}

template <class T>
void swiglu_backward(T* dx, SwiGLUWeights<T>& grads, const T* dy, const T* x, int n,
                     const SwiGLUWeights<T>& w, const SwiGLUCache<T>& cache) {
  const int c = w.fc1.dim(1), f = w.fc2.dim(1);
  if (n == 0) return;
  // forward: y = act fc2^T, so dact = dy fc2 (written, not accumulated: no zero fill) and
  // dfc2 += dy^T act.
  std::vector<T> dact(static_cast<std::size_t>(n) * f);
  cpu::matmul<T>(dact.data(), dy, w.fc2.ptr(), n, f, c);
  cpu::linear_backward<T>(nullptr, grads.fc2.ptr(), nullptr, dy, cache.act.data(), w.fc2.ptr(), n,
                          f, c);
  // forward: act = silu(g) * u, so dg = dact * u * silu'(g) and du = dact * silu(g); one sigmoid
  // per entry, in math::silu's and math::silu_grad's expressions.
  std::vector<T> dh(static_cast<std::size_t>(n) * 2 * f);
  for (int i = 0; i < n; ++i) {
    const T* h = cache.h.data() + static_cast<long>(i) * 2 * f;
    const T* da = dact.data() + static_cast<long>(i) * f;
    T* d = dh.data() + static_cast<long>(i) * 2 * f;
    for (int j = 0; j < f; ++j) {
      const T g = h[j], s = math::sigmoid(g);
      d[j] = da[j] * h[f + j] * (s + g * s * (T(1) - s));
      d[f + j] = da[j] * (g * s);
    }
  }
  cpu::linear_backward<T>(dx, grads.fc1.ptr(), nullptr, dh.data(), x, w.fc1.ptr(), n, c, 2 * f);
}

template <class T>
void mlp_init(MlpParams<T>& p, const ModelConfig& cfg, Rng& rng) {
  swiglu_init<T>(p.w, cfg.hidden, cfg.ffn_hidden, static_cast<T>(cfg.init_std), rng);
}

template <class T>
void mlp_forward(const ModelConfig& /*cfg*/, const MlpParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MlpCache<T>& cache) {
  if (out.shape != inp.shape) out = Tensor<T>(inp.shape);
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(inp.dim(-1)));
  swiglu_forward<T>(out.ptr(), cache.inner, inp.ptr(), n, p.w);
}

template <class T>
void mlp_backward(const ModelConfig& /*cfg*/, const MlpParams<T>& p, const MlpCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  MlpParams<T>& grads) {
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(inp.dim(-1)));
  swiglu_backward<T>(dinp.ptr(), grads.w, dout.ptr(), inp.ptr(), n, p.w, cache.inner);
}

#define HT_INSTANTIATE(T)                                                                     \
  template void swiglu_init<T>(SwiGLUWeights<T>&, int, int, T, Rng&);                        \
  template void swiglu_forward<T>(T*, SwiGLUCache<T>&, const T*, int, const SwiGLUWeights<T>&); \
  template void swiglu_backward<T>(T*, SwiGLUWeights<T>&, const T*, const T*, int,           \
                                   const SwiGLUWeights<T>&, const SwiGLUCache<T>&);          \
  template void mlp_init<T>(MlpParams<T>&, const ModelConfig&, Rng&);                        \
  template void mlp_forward<T>(const ModelConfig&, const MlpParams<T>&, const Tensor<T>&,    \
                               Tensor<T>&, MlpCache<T>&);                                    \
  template void mlp_backward<T>(const ModelConfig&, const MlpParams<T>&, const MlpCache<T>&, \
                                const Tensor<T>&, const Tensor<T>&, Tensor<T>&, MlpParams<T>&);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
