// CPU reference SwiGLU MLP (see swiglu.hpp for shapes). The elementwise SwiGLU runs row by row as
// Eigen array expressions (vectorised exp) in math::silu's and math::silu_grad's formulas:
// silu(g) = g * (1 / (1 + exp(-g))), silu'(g) = s + g s (1 - s).
#include "ht/engine/layers/swiglu.hpp"

#include <memory>

#include <Eigen/Core>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"
#include "ht/engine/rng.hpp"

namespace ht::engine {
namespace {
template <class T>
using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using CRowMap = Eigen::Map<const Row<T>>;
template <class T>
using RowMap = Eigen::Map<Row<T>>;
}  // namespace

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
  // forward: act = silu(g) * u with [g | u] = one row of h
  for (int i = 0; i < n; ++i) {
    const T* h = cache.h.data() + static_cast<long>(i) * 2 * f;
    const CRowMap<T> g(h, f), u(h + f, f);
    RowMap<T>(cache.act.data() + static_cast<long>(i) * f, f) = g * (T(1) + (-g).exp()).inverse() * u;
  }
  cpu::linear_forward<T>(y, cache.act.data(), w.fc2.ptr(), nullptr, n, f, c);
}

template <class T>
void swiglu_backward(T* dx, SwiGLUWeights<T>& grads, const T* dy, const T* x, int n,
                     const SwiGLUWeights<T>& w, const SwiGLUCache<T>& cache, WgradSink<T>* wgrad) {
  const int c = w.fc1.dim(1), f = w.fc2.dim(1);
  if (n == 0) return;
  // Scratch is written in full before it is read: no zero fill.
  const std::unique_ptr<T[]> dact(new T[static_cast<std::size_t>(n) * f]);
  const std::unique_ptr<T[]> dh(new T[static_cast<std::size_t>(n) * 2 * f]);
  // forward: y = act fc2^T, so dact = dy fc2 (written, not accumulated) and dfc2 += dy^T act.
  cpu::matmul<T>(dact.get(), dy, w.fc2.ptr(), n, f, c);
  cpu::linear_backward<T>(nullptr, grads.fc2.ptr(), nullptr, dy, cache.act.data(), w.fc2.ptr(), n,
                          f, c, wgrad);
  // forward: act = silu(g) * u, so dg = dact * u * silu'(g) and du = dact * silu(g), with one
  // sigmoid s per entry.
  Row<T> sig(f);
  for (int i = 0; i < n; ++i) {
    const T* h = cache.h.data() + static_cast<long>(i) * 2 * f;
    const CRowMap<T> g(h, f), u(h + f, f), da(dact.get() + static_cast<long>(i) * f, f);
    T* d = dh.get() + static_cast<long>(i) * 2 * f;
    sig = (T(1) + (-g).exp()).inverse();
    RowMap<T>(d, f) = da * u * (sig + g * sig * (T(1) - sig));
    RowMap<T>(d + f, f) = da * (g * sig);
  }
  cpu::linear_backward<T>(dx, grads.fc1.ptr(), nullptr, dh.get(), x, w.fc1.ptr(), n, c, 2 * f,
                          wgrad);
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
                  MlpParams<T>& grads, WgradSink<T>* wgrad) {
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(inp.dim(-1)));
  swiglu_backward<T>(dinp.ptr(), grads.w, dout.ptr(), inp.ptr(), n, p.w, cache.inner, wgrad);
}

#define HT_INSTANTIATE(T)                                                                     \
  template void swiglu_init<T>(SwiGLUWeights<T>&, int, int, T, Rng&);                        \
  template void swiglu_forward<T>(T*, SwiGLUCache<T>&, const T*, int, const SwiGLUWeights<T>&); \
  template void swiglu_backward<T>(T*, SwiGLUWeights<T>&, const T*, const T*, int,           \
                                   const SwiGLUWeights<T>&, const SwiGLUCache<T>&,           \
                                   WgradSink<T>*);                                           \
  template void mlp_init<T>(MlpParams<T>&, const ModelConfig&, Rng&);                        \
  template void mlp_forward<T>(const ModelConfig&, const MlpParams<T>&, const Tensor<T>&,    \
                               Tensor<T>&, MlpCache<T>&);                                    \
  template void mlp_backward<T>(const ModelConfig&, const MlpParams<T>&, const MlpCache<T>&, \
                                const Tensor<T>&, const Tensor<T>&, Tensor<T>&, MlpParams<T>&, \
                                WgradSink<T>*);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
