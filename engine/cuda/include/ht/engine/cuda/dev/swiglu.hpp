// CUDA layers, part 2: the SwiGLU MLP (dense '-', every expert, the shared expert) over a device
// policy D (dev/host.hpp); shapes and chunk order as layers/swiglu.hpp:
// y (n, C) = fc2( silu(x fc1_gate^T) * (x fc1_up^T) ), fc1 (2F, C), fc2 (C, F).
#pragma once

#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/wgrad.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

template <class T>
struct SwiGLUW {
  const T* fc1 = nullptr;  // (2F, C)
  const T* fc2 = nullptr;  // (C, F)
  int c = 0, f = 0;
};
template <class T>
struct SwiGLUGrad {
  T* fc1 = nullptr;
  T* fc2 = nullptr;
};

template <class D, class T>
struct SwiGLUCacheD {
  Buf<D, T> h;    // (n, 2F)
  Buf<D, T> act;  // (n, F)
};

// y (n, C) is overwritten.
template <class D, class T>
void swiglu_forward(T* y, SwiGLUCacheD<D, T>& cache, const T* x, int n, const SwiGLUW<T>& w) {
  const int c = w.c, f = w.f;
  cache.h.resize(static_cast<std::size_t>(n) * 2 * f);
  cache.act.resize(static_cast<std::size_t>(n) * f);
  if (n == 0) return;
  T* h = cache.h.get();
  T* act = cache.act.get();
  D::gemm(h, x, w.fc1, n, 2 * f, c, false, true, false);
  D::launch(n, [=] HT_HD(long i) {
    const T* g = h + i * 2 * f;
    const T* u = g + f;
    T* a = act + i * f;
    for (int j = 0; j < f; ++j) a[j] = g[j] * (T(1) / (T(1) + std::exp(-g[j]))) * u[j];
  });
  D::gemm(y, act, w.fc2, n, c, f, false, true, false);
}

// dx and the weight gradients accumulate; with `wgrad` the fc2 and fc1 weight GEMMs go to the sink.
template <class D, class T>
void swiglu_backward(T* dx, const SwiGLUGrad<T>& grads, const T* dy, const T* x, int n, const SwiGLUW<T>& w,
                     const SwiGLUCacheD<D, T>& cache, WgradSink<T>* wgrad = nullptr) {
  const int c = w.c, f = w.f;
  if (n == 0) return;
  Buf<D, T> dact_buf(static_cast<std::size_t>(n) * f), dh_buf(static_cast<std::size_t>(n) * 2 * f);
  T* dact = dact_buf.get();
  T* dh = dh_buf.get();
  const T* h = cache.h.get();
  // forward: y = act fc2^T
  D::gemm(dact, dy, w.fc2, n, f, c, false, false, false);
  weight_gemm<D, T>(grads.fc2, dy, cache.act.get(), n, f, c, wgrad);
  // forward: act = silu(g) u
  D::launch(n, [=] HT_HD(long i) {
    const T* g = h + i * 2 * f;
    const T* u = g + f;
    const T* da = dact + i * f;
    T* d = dh + i * 2 * f;
    for (int j = 0; j < f; ++j) {
      const T s = T(1) / (T(1) + std::exp(-g[j]));
      d[j] = da[j] * u[j] * (s + g[j] * s * (T(1) - s));
      d[f + j] = da[j] * (g[j] * s);
    }
  });
  // forward: h = x fc1^T
  D::gemm(dx, dh, w.fc1, n, c, 2 * f, false, false, true);
  weight_gemm<D, T>(grads.fc1, dh, x, n, c, 2 * f, wgrad);
}

}  // namespace ht::engine::dev
