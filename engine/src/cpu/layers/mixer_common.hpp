// Private to the CPU mixer layers ('M' Mamba2, 'G' Gated DeltaNet, '+' MLA): init fills, the
// causal depthwise conv1d that Mamba2 and GDN run over their projected channels, and the per-row
// RMSNorm used inside the mixers (the block's own pre-norm lives with the model, not here).
// Header-only templates: float for the engine, double for finite differences, same code.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine::mixer {

// Projections: normal(0, init_std) like the engine's other layers.
template <class T>
void fill_normal(Tensor<T>& t, Rng& rng, double std) {
  for (auto& v : t.data) v = static_cast<T>(rng.normal() * std);
}
template <class T>
void fill_uniform(Tensor<T>& t, Rng& rng, double lo, double hi) {
  for (auto& v : t.data) v = static_cast<T>(rng.uniform(lo, hi));
}
template <class T>
void fill_constant(Tensor<T>& t, double value) {
  for (auto& v : t.data) v = static_cast<T>(value);
}
// Mamba2/GDN dt_bias: dt drawn log-uniform in [dt_min, dt_max] (floored), then inverse softplus
// so that softplus(dt_bias) == dt at init.
template <class T>
void fill_dt_bias(Tensor<T>& dt_bias, Rng& rng, double dt_min = 1e-3, double dt_max = 0.1,
                  double dt_floor = 1e-4) {
  for (auto& v : dt_bias.data) {
    double dt = std::exp(rng.uniform(std::log(dt_min), std::log(dt_max)));
    if (dt < dt_floor) dt = dt_floor;
    v = static_cast<T>(dt + std::log(-std::expm1(-dt)));
  }
}
// A_log = log(U[1, 16]) as in Mamba2 and GDN.
template <class T>
void fill_a_log(Tensor<T>& a_log, Rng& rng) {
  for (auto& v : a_log.data) v = static_cast<T>(std::log(rng.uniform(1.0, 16.0)));
}

inline void require_positive(int v, const char* what, const char* layer) {
  if (v <= 0)
    throw std::invalid_argument(std::string(layer) + ": " + what + " must be positive, got " +
                                std::to_string(v));
}

// Causal depthwise conv1d over the time axis, as nn.Conv1d(groups=channels, padding=K-1) with
// the last K-1 outputs dropped: out[t,c] = bias[c] + sum_k w[c,k] * in[t-(K-1)+k, c].
// in rows have stride in_stride (the conv reads a slice of a wider projection), out is (B,T,Ch).
// w is (Ch, K); bias may be nullptr.
template <class T>
void causal_conv_forward(T* out, const T* in, int in_stride, const T* w, const T* bias, int B,
                         int Tn, int Ch, int K) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++) {
      T* o = out + (static_cast<std::size_t>(b) * Tn + t) * Ch;
      for (int c = 0; c < Ch; c++) {
        T acc = bias ? bias[c] : T(0);
        for (int k = 0; k < K; k++) {
          int ts = t - (K - 1) + k;
          if (ts < 0) continue;
          acc += w[c * K + k] * in[(static_cast<std::size_t>(b) * Tn + ts) * in_stride + c];
        }
        o[c] = acc;
      }
    }
}
// Backward of causal_conv_forward; din (row stride in_stride), dw, dbias accumulate.
template <class T>
void causal_conv_backward(T* din, T* dw, T* dbias, const T* dout, const T* in, int in_stride,
                          const T* w, int B, int Tn, int Ch, int K) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < Tn; t++) {
      const T* d = dout + (static_cast<std::size_t>(b) * Tn + t) * Ch;
      for (int c = 0; c < Ch; c++) {
        // forward: acc = bias[c] + sum_k w[c,k] * in[t-(K-1)+k, c]
        if (dbias) dbias[c] += d[c];
        for (int k = 0; k < K; k++) {
          int ts = t - (K - 1) + k;
          if (ts < 0) continue;
          std::size_t src = (static_cast<std::size_t>(b) * Tn + ts) * in_stride + c;
          dw[c * K + k] += d[c] * in[src];
          din[src] += w[c * K + k] * d[c];
        }
      }
    }
}

// One RMSNorm row: out[i] = x[i] * rstd * w[i], rstd = 1/sqrt(mean(x^2) + eps). Returns rstd.
template <class T>
T rmsnorm_row_forward(T* out, const T* x, const T* w, int n, T eps) {
  T ss = 0;
  for (int i = 0; i < n; i++) ss += x[i] * x[i];
  T rstd = T(1) / std::sqrt(ss / T(n) + eps);
  for (int i = 0; i < n; i++) out[i] = x[i] * rstd * w[i];
  return rstd;
}
// Backward of rmsnorm_row_forward with its cached rstd; dx and dw accumulate.
// With xh = x*rstd: dw += dout*xh, dx += rstd * (dxh - xh * mean(dxh * xh)), dxh = dout*w.
template <class T>
void rmsnorm_row_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, T rstd, int n) {
  T dot = 0;
  for (int i = 0; i < n; i++) dot += dout[i] * w[i] * x[i] * rstd;
  dot /= T(n);
  for (int i = 0; i < n; i++) {
    T xh = x[i] * rstd;
    dw[i] += dout[i] * xh;
    dx[i] += rstd * (dout[i] * w[i] - xh * dot);
  }
}

}  // namespace ht::engine::mixer
