// Elementwise and per-row math written once for both backends: plain inline functions that a
// CUDA kernel can call (HT_HD expands to __host__ __device__ under nvcc), so the CPU tests cover
// the exact code the GPU runs. Templated on the scalar so the float64 finite-difference path uses
// the same formulas.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define HT_HD __host__ __device__
#else
#define HT_HD
#endif

namespace ht::engine::math {

template <class T> HT_HD inline T sigmoid(T x) { return T(1) / (T(1) + std::exp(-x)); }
template <class T> HT_HD inline T silu(T x) { return x * sigmoid(x); }
// d silu(x) / dx = s + x s (1 - s)
template <class T> HT_HD inline T silu_grad(T x) {
  T s = sigmoid(x);
  return s + x * s * (T(1) - s);
}
// softplus with the usual large-x passthrough (same threshold as PyTorch: 20)
template <class T> HT_HD inline T softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }
template <class T> HT_HD inline T softplus_grad(T x) { return sigmoid(x); }

}  // namespace ht::engine::math

// ---- per-row helpers (a "row" is a contiguous run of n values; one GPU thread per row, keeping the CPU's order) ----
namespace ht::engine::math {

// Numerically stable softmax of one row, in place order: max, then exp-sum, then scale, each a
// left-to-right loop (the fixed reduction order every backend must reproduce).
template <class T> HT_HD inline void softmax_row(T* out, const T* in, int n) {
  T m = in[0];
  for (int i = 1; i < n; ++i) m = in[i] > m ? in[i] : m;
  T s = T(0);
  for (int i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - m);
    s += out[i];
  }
  const T inv = T(1) / s;
  for (int i = 0; i < n; ++i) out[i] *= inv;
}

// log(sum(exp(in))) with the same max-shift as softmax_row.
template <class T> HT_HD inline T logsumexp_row(const T* in, int n) {
  T m = in[0];
  for (int i = 1; i < n; ++i) m = in[i] > m ? in[i] : m;
  T s = T(0);
  for (int i = 0; i < n; ++i) s += std::exp(in[i] - m);
  return m + std::log(s);
}

// Backward of softmax for one row: dx_i += p_i (dp_i - sum_j p_j dp_j).
template <class T> HT_HD inline void softmax_row_backward(T* dx, const T* p, const T* dp, int n) {
  T dot = T(0);
  for (int i = 0; i < n; ++i) dot += p[i] * dp[i];
  for (int i = 0; i < n; ++i) dx[i] += p[i] * (dp[i] - dot);
}

// 1 / sqrt(mean(x^2) + eps) of one row.
template <class T> HT_HD inline T rms_rstd(const T* x, int n, T eps) {
  T ss = T(0);
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  return T(1) / std::sqrt(ss / T(n) + eps);
}

// Rotary embedding, rotate-half form, on one head vector of even length d at position pos:
// (x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin), angle = pos theta^(-2i/d).
// inverse = true applies the transpose rotation (the backward of the forward rotation).
template <class T> HT_HD inline void rope_row(T* x, int d, int pos, T theta, bool inverse) {
  const int h = d / 2;
  for (int i = 0; i < h; ++i) {
    const T freq = std::pow(theta, -T(2 * i) / T(d));
    const T ang = T(pos) * freq;
    const T c = std::cos(ang), s = inverse ? -std::sin(ang) : std::sin(ang);
    const T a = x[i], b = x[i + h];
    x[i] = a * c - b * s;
    x[i + h] = b * c + a * s;
  }
}

// RoPE's cos and sin for positions 0..t-1 and channel pairs 0..d/2-1, (t, d/2) row-major, in
// rope_row's expressions. Host code: both backends build their tables here, so they rotate by
// the same bits.
template <class Vec, class T> inline void rope_table(Vec& cs, Vec& sn, int t, int d, T theta) {
  const int half = d / 2;
  cs.resize(static_cast<std::size_t>(t) * half);
  sn.resize(cs.size());
  for (int pos = 0; pos < t; ++pos)
    for (int i = 0; i < half; ++i) {
      const T freq = std::pow(theta, -T(2 * i) / T(d));
      const T ang = T(pos) * freq;
      cs[static_cast<std::size_t>(pos) * half + i] = std::cos(ang);
      sn[static_cast<std::size_t>(pos) * half + i] = std::sin(ang);
    }
}

}  // namespace ht::engine::math
