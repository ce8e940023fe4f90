// CUDA layers, part 3: causal GQA attention with RoPE and an optional window ('*', 'W') over a
// device policy D (dev/host.hpp). Layout, head order and math as layers/attention.hpp: per
// (batch, head) the score and value products are (T, T) GEMMs, entries outside the causal
// window are set to 0 after the softmax; one thread per score row runs math::softmax_row.
// Heads of one kv group add their dk, dv in head order (GEMMs issued in that order), as the CPU.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/wgrad.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

struct AttnDims {
  int b, t, c, h, g, d, hpg, width;
  HT_HD long q_col(int head) const { return static_cast<long>(head / hpg) * (hpg + 2) * d + static_cast<long>(head % hpg) * d; }
  HT_HD long k_col(int grp) const { return static_cast<long>(grp) * (hpg + 2) * d + static_cast<long>(hpg) * d; }
  HT_HD long v_col(int grp) const { return k_col(grp) + d; }
};

inline AttnDims attn_dims(const ModelConfig& cfg, int b, int t, int c) {
  if (cfg.num_kv_heads <= 0 || cfg.num_heads % cfg.num_kv_heads != 0)
    throw std::invalid_argument("attention: num_heads (" + std::to_string(cfg.num_heads) +
                                ") must be a multiple of num_kv_heads (" + std::to_string(cfg.num_kv_heads) + ")");
  if (cfg.rope && cfg.head_dim % 2 != 0) throw std::invalid_argument("attention: RoPE needs an even head_dim");
  const int h = cfg.num_heads, g = cfg.num_kv_heads, d = cfg.head_dim;
  return AttnDims{b, t, c, h, g, d, h / g, (h + 2 * g) * d};
}

template <class T>
struct AttnW {
  const T* qkv = nullptr;   // ((H + 2G) D, C)
  const T* proj = nullptr;  // (C, H D)
};
template <class T>
struct AttnGrad {
  T* qkv = nullptr;
  T* proj = nullptr;
};

template <class D, class T>
struct AttnCacheD {
  Buf<D, T> q, k, v;  // (B, H, T, D), (B, G, T, D) x 2, q and k after RoPE
  Buf<D, T> att;      // (B, H, T, T)
  Buf<D, T> o;        // (B, T, H D)
  Buf<D, T> cs, sn;   // RoPE table (T, D/2), empty without RoPE
};

// RoPE's cos/sin per (position, pair), built on the host by the CPU reference's math::rope_table
// (so both backends rotate by the same bits) and uploaded.
template <class D, class T>
void rope_table(Buf<D, T>& cs, Buf<D, T>& sn, int t, int d, T theta) {
  std::vector<T> c, s;
  math::rope_table(c, s, t, d, theta);
  cs = upload<D>(c.data(), c.size());
  sn = upload<D>(s.data(), s.size());
}

// x (d) at position pos rotated by +angle, or -angle when inverse; cs/sn null = no RoPE.
template <class T>
HT_HD inline void rope_apply(T* x, const T* cs, const T* sn, int pos, int d, bool inverse) {
  if (cs == nullptr) return;
  const int half = d / 2;
  const T* c = cs + static_cast<long>(pos) * half;
  const T* sv = sn + static_cast<long>(pos) * half;
  for (int i = 0; i < half; ++i) {
    const T s = inverse ? -sv[i] : sv[i];
    const T a = x[i], b = x[i + half];
    x[i] = a * c[i] - b * s;
    x[i + half] = b * c[i] + a * s;
  }
}

// Thread i of the qkv split/merge: token bt = (batch, position), slot < H a q head, else kv group
// slot - H; `head` is the offset of its (T, D) row in q (or k and v), `col` its column in qkv.
struct QkvSlot {
  long bt, head;
  int pos;
  bool is_q;
  long col, v_col;
};
HT_HD inline QkvSlot qkv_slot(const AttnDims& dm, long i) {
  QkvSlot s{};
  const int slot = static_cast<int>(i % (dm.h + dm.g));
  s.bt = i / (dm.h + dm.g);
  const long bb = s.bt / dm.t;
  s.pos = static_cast<int>(s.bt % dm.t);
  s.is_q = slot < dm.h;
  if (s.is_q) {
    s.head = ((bb * dm.h + slot) * dm.t + s.pos) * dm.d;
    s.col = dm.q_col(slot);
  } else {
    s.head = ((bb * dm.g + (slot - dm.h)) * dm.t + s.pos) * dm.d;
    s.col = dm.k_col(slot - dm.h);
    s.v_col = dm.v_col(slot - dm.h);
  }
  return s;
}

HT_HD inline int attn_window_start(int t, int window) { return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; }

// inp, out (B, T, C); out is overwritten.
template <class D, class T>
void attention_forward(const ModelConfig& cfg, const AttnW<T>& w, const T* inp, T* out, int b, int t, int c,
                       AttnCacheD<D, T>& cache, int window) {
  const AttnDims dm = attn_dims(cfg, b, t, c);
  const int n = b * t;
  Buf<D, T> qkv_buf(static_cast<std::size_t>(n) * dm.width);
  T* qkv = qkv_buf.get();
  D::gemm(qkv, inp, w.qkv, n, dm.width, c, false, true, false);
  if (cfg.rope) rope_table(cache.cs, cache.sn, t, dm.d, static_cast<T>(cfg.rope_theta));
  cache.q.resize(static_cast<std::size_t>(b) * dm.h * t * dm.d);
  cache.k.resize(static_cast<std::size_t>(b) * dm.g * t * dm.d);
  cache.v.resize(cache.k.size());
  T *q = cache.q.get(), *k = cache.k.get(), *v = cache.v.get();
  const T* cs = cfg.rope ? cache.cs.get() : nullptr;
  const T* sn = cfg.rope ? cache.sn.get() : nullptr;
  // One thread per (token, q head or kv group): split the fused row, rotate q and k.
  D::launch(static_cast<long>(n) * (dm.h + dm.g), [=] HT_HD(long i) {
    const QkvSlot sl = qkv_slot(dm, i);
    const T* row = qkv + sl.bt * dm.width;
    T* dst = (sl.is_q ? q : k) + sl.head;
    for (int j = 0; j < dm.d; ++j) dst[j] = row[sl.col + j];
    if (!sl.is_q)
      for (int j = 0; j < dm.d; ++j) v[sl.head + j] = row[sl.v_col + j];
    rope_apply(dst, cs, sn, sl.pos, dm.d, false);
  });

  const long tt2 = static_cast<long>(t) * t;
  cache.att.resize(static_cast<std::size_t>(b) * dm.h * tt2);
  cache.o.resize(static_cast<std::size_t>(n) * dm.h * dm.d);
  T* att = cache.att.get();
  for (int bb = 0; bb < b; ++bb)
    for (int hh = 0; hh < dm.h; ++hh) {
      const long kv = (static_cast<long>(bb) * dm.g + hh / dm.hpg) * t * dm.d;
      D::gemm(att + (static_cast<long>(bb) * dm.h + hh) * tt2, q + (static_cast<long>(bb) * dm.h + hh) * t * dm.d,
              k + kv, t, t, dm.d, false, true, false);
    }
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  D::launch(static_cast<long>(b) * dm.h * t, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % dm.t);
    T* row = att + i * dm.t;
    const int lo = attn_window_start(tq, window);
    for (int u = lo; u <= tq; ++u) row[u] *= scale;
    math::softmax_row(row + lo, row + lo, tq - lo + 1);
    for (int u = 0; u < lo; ++u) row[u] = T(0);
    for (int u = tq + 1; u < dm.t; ++u) row[u] = T(0);
  });
  Buf<D, T> obh_buf(static_cast<std::size_t>(b) * dm.h * t * dm.d);
  T* obh = obh_buf.get();
  for (int bb = 0; bb < b; ++bb)
    for (int hh = 0; hh < dm.h; ++hh) {
      const long kv = (static_cast<long>(bb) * dm.g + hh / dm.hpg) * t * dm.d;
      D::gemm(obh + (static_cast<long>(bb) * dm.h + hh) * t * dm.d, att + (static_cast<long>(bb) * dm.h + hh) * tt2,
              v + kv, t, dm.d, t, false, false, false);
    }
  // (B, H, T, D) -> (B, T, H D)
  T* o = cache.o.get();
  D::launch(static_cast<long>(b) * dm.h * t, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % dm.t);
    const int hh = static_cast<int>((i / dm.t) % dm.h);
    const long bb = i / (static_cast<long>(dm.t) * dm.h);
    const T* src = obh + i * dm.d;
    T* dst = o + (bb * dm.t + tq) * dm.h * dm.d + static_cast<long>(hh) * dm.d;
    for (int j = 0; j < dm.d; ++j) dst[j] = src[j];
  });
  D::gemm(out, o, w.proj, n, c, dm.h * dm.d, false, true, false);
}

// dinp and the weight gradients accumulate.
template <class D, class T>
void attention_backward(const ModelConfig& cfg, const AttnW<T>& w, const AttnCacheD<D, T>& cache, const T* inp,
                        const T* dout, T* dinp, const AttnGrad<T>& grads, int b, int t, int c, int window,
                        WgradSink<T>* wgrad = nullptr) {
  const AttnDims dm = attn_dims(cfg, b, t, c);
  const int n = b * t;
  const int hd = dm.h * dm.d;
  Buf<D, T> d_o_buf;
  d_o_buf.assign_zero(static_cast<std::size_t>(n) * hd);
  T* d_o = d_o_buf.get();
  // forward: out = o proj^T
  D::gemm(d_o, dout, w.proj, n, hd, c, false, false, true);
  weight_gemm<D, T>(grads.proj, dout, cache.o.get(), n, hd, c, wgrad);

  // (B, T, H D) -> (B, H, T, D)
  Buf<D, T> dobh_buf(static_cast<std::size_t>(b) * dm.h * t * dm.d);
  T* dobh = dobh_buf.get();
  D::launch(static_cast<long>(b) * dm.h * t, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % dm.t);
    const int hh = static_cast<int>((i / dm.t) % dm.h);
    const long bb = i / (static_cast<long>(dm.t) * dm.h);
    const T* src = d_o + (bb * dm.t + tq) * dm.h * dm.d + static_cast<long>(hh) * dm.d;
    T* dst = dobh + i * dm.d;
    for (int j = 0; j < dm.d; ++j) dst[j] = src[j];
  });

  const long tt2 = static_cast<long>(t) * t;
  Buf<D, T> dq_buf(cache.q.size()), dk_buf, dv_buf, ds_buf(static_cast<std::size_t>(b) * dm.h * tt2);
  dk_buf.assign_zero(cache.k.size());
  dv_buf.assign_zero(cache.v.size());
  T *dq = dq_buf.get(), *dk = dk_buf.get(), *dv = dv_buf.get(), *ds = ds_buf.get();
  const T* att = cache.att.get();
  const T* q = cache.q.get();
  const T* k = cache.k.get();
  const T* v = cache.v.get();
  // forward: o = att v, so datt = do v^T (into ds) and dv += att^T do
  for (int bb = 0; bb < b; ++bb)
    for (int hh = 0; hh < dm.h; ++hh) {
      const long bh = static_cast<long>(bb) * dm.h + hh;
      const long kv = (static_cast<long>(bb) * dm.g + hh / dm.hpg) * t * dm.d;
      D::gemm(ds + bh * tt2, dobh + bh * t * dm.d, v + kv, t, t, dm.d, false, true, false);
      D::gemm(dv + kv, att + bh * tt2, dobh + bh * t * dm.d, t, dm.d, t, true, false, true);
    }
  // forward: att = softmax(scale q k^T) on [lo, t] of each row, 0 elsewhere (ds in place)
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  Buf<D, T> datt_row_buf(ds_buf.size());
  T* datt = datt_row_buf.get();
  D::copy(datt, ds, ds_buf.size());
  D::launch(static_cast<long>(b) * dm.h * t, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % dm.t);
    const long r = i * dm.t;
    const int lo = attn_window_start(tq, window);
    for (int u = 0; u < dm.t; ++u) ds[r + u] = T(0);
    math::softmax_row_backward(ds + r + lo, att + r + lo, datt + r + lo, tq - lo + 1);
    for (int u = lo; u <= tq; ++u) ds[r + u] *= scale;
  });
  // forward: scores = q k^T, so dq = ds k and dk += ds^T q
  for (int bb = 0; bb < b; ++bb)
    for (int hh = 0; hh < dm.h; ++hh) {
      const long bh = static_cast<long>(bb) * dm.h + hh;
      const long kv = (static_cast<long>(bb) * dm.g + hh / dm.hpg) * t * dm.d;
      D::gemm(dq + bh * t * dm.d, ds + bh * tt2, k + kv, t, dm.d, t, false, false, false);
      D::gemm(dk + kv, ds + bh * tt2, q + bh * t * dm.d, t, dm.d, t, true, false, true);
    }
  // Undo RoPE (its transpose) and scatter into the fused qkv layout.
  Buf<D, T> dqkv_buf;
  dqkv_buf.assign_zero(static_cast<std::size_t>(n) * dm.width);
  T* dqkv = dqkv_buf.get();
  const T* cs = cfg.rope ? cache.cs.get() : nullptr;
  const T* sn = cfg.rope ? cache.sn.get() : nullptr;
  D::launch(static_cast<long>(n) * (dm.h + dm.g), [=] HT_HD(long i) {
    const QkvSlot sl = qkv_slot(dm, i);
    T* row = dqkv + sl.bt * dm.width;
    T* src = (sl.is_q ? dq : dk) + sl.head;
    rope_apply(src, cs, sn, sl.pos, dm.d, true);
    for (int j = 0; j < dm.d; ++j) row[sl.col + j] = src[j];
    if (!sl.is_q)
      for (int j = 0; j < dm.d; ++j) row[sl.v_col + j] = dv[sl.head + j];
  });
  D::gemm(dinp, dqkv, w.qkv, n, c, dm.width, false, false, true);
  weight_gemm<D, T>(grads.qkv, dqkv, inp, n, c, dm.width, wgrad);
}

}  // namespace ht::engine::dev
