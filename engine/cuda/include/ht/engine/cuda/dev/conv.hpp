// The causal depthwise conv1d + SiLU that Mamba2 and GDN run over their projected channels, on a
// device policy D (dev/host.hpp); math and accumulation orders of the CPU's mixer_common.hpp:
// pre[r, c] = bias[c] + sum_k w[c, k] in[r - (K-1) + k, c] (taps before the sequence start are
// skipped), act = silu(pre). `in` rows have stride in_stride (a slice of a wider projection);
// rows = B T, sequences of t rows; pre and act are (rows, ch); w is (ch, K); bias may be null.
#pragma once

#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

// One thread per (row, channel).
template <class D, class T>
void causal_conv_silu_forward(T* pre, T* act, const T* in, int in_stride, const T* w, const T* bias, long rows, int t,
                              int ch, int k) {
  D::launch(rows * ch, [=] HT_HD(long i) {
    const long r = i / ch;
    const int cc = static_cast<int>(i % ch);
    const long row0 = r - r % t;
    const int tt = static_cast<int>(r % t);
    T acc = bias ? bias[cc] : T(0);
    for (int j = 0; j < k; ++j) {
      const int ts = tt - (k - 1) + j;
      if (ts < 0) continue;
      acc += w[cc * k + j] * in[(row0 + ts) * in_stride + cc];
    }
    pre[i] = acc;
    act[i] = math::silu(acc);
  });
}

// Backward from dact: din (stride in_stride), dw and dbias (when non-null) accumulate. An input
// (row ts, channel) gathers from the outputs ts .. ts+K-1 in increasing order (the CPU's scatter
// order); a weight or bias gradient is one thread adding the rows in order.
template <class D, class T>
void causal_conv_silu_backward(T* din, int in_stride, T* dw, T* dbias, const T* dact, const T* pre, const T* in,
                               const T* w, long rows, int t, int ch, int k) {
  Buf<D, T> dpre_buf(static_cast<std::size_t>(rows) * ch);
  T* dpre = dpre_buf.get();
  D::launch(rows * ch, [=] HT_HD(long i) { dpre[i] = dact[i] * math::silu_grad(pre[i]); });
  D::launch(rows * ch, [=] HT_HD(long i) {
    const long r = i / ch;
    const int cc = static_cast<int>(i % ch);
    const long row0 = r - r % t;
    const int ts = static_cast<int>(r % t);
    T& d = din[r * in_stride + cc];
    T acc = d;
    for (int tt = ts; tt < t && tt <= ts + k - 1; ++tt) acc += w[cc * k + (ts - tt + k - 1)] * dpre[(row0 + tt) * ch + cc];
    d = acc;
  });
  D::launch(static_cast<long>(ch) * k, [=] HT_HD(long i) {
    const int cc = static_cast<int>(i / k);
    const int j = static_cast<int>(i % k);
    T acc = dw[i];
    for (long r = 0; r < rows; ++r) {
      const int ts = static_cast<int>(r % t) - (k - 1) + j;
      if (ts < 0) continue;
      acc += dpre[r * ch + cc] * in[(r - r % t + ts) * in_stride + cc];
    }
    dw[i] = acc;
  });
  if (dbias)
    D::launch(ch, [=] HT_HD(long cc) {
      T acc = dbias[cc];
      for (long r = 0; r < rows; ++r) acc += dpre[r * ch + cc];
      dbias[cc] = acc;
    });
}

}  // namespace ht::engine::dev
