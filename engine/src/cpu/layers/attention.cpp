// CPU reference causal GQA attention with RoPE and an optional window (see attention.hpp).
// Per (batch, head) the score and value products are (T, T) GEMMs through cpu::matmul (entries
// outside the causal window are computed and then set to 0 in att, so they add nothing); the
// softmax is per row. Every sum has a fixed order for fixed shapes: the same bits on every run.
#include "ht/engine/layers/attention.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine {
namespace {

struct Dims {
  int b, t, c, h, g, d, hpg, qkv_width;
  long q_row(int head) const {  // row of head `head`'s first q channel inside one qkv row
    const int grp = head / hpg, j = head % hpg;
    return static_cast<long>(grp) * (hpg + 2) * d + static_cast<long>(j) * d;
  }
  long k_row(int grp) const { return static_cast<long>(grp) * (hpg + 2) * d + hpg * d; }
  long v_row(int grp) const { return k_row(grp) + d; }
};

template <class T>
Dims dims_of(const ModelConfig& cfg, const Tensor<T>& inp) {
  if (inp.rank() != 3) throw std::invalid_argument("attention input must be (B, T, C)");
  if (cfg.num_kv_heads <= 0 || cfg.num_heads % cfg.num_kv_heads != 0)
    throw std::invalid_argument("attention: num_heads (" + std::to_string(cfg.num_heads) +
                                ") must be a multiple of num_kv_heads (" +
                                std::to_string(cfg.num_kv_heads) + ")");
  if (cfg.rope && cfg.head_dim % 2 != 0)
    throw std::invalid_argument("attention: RoPE needs an even head_dim");
  Dims dm{};
  dm.b = inp.dim(0);
  dm.t = inp.dim(1);
  dm.c = inp.dim(2);
  dm.h = cfg.num_heads;
  dm.g = cfg.num_kv_heads;
  dm.d = cfg.head_dim;
  dm.hpg = dm.h / dm.g;
  dm.qkv_width = (dm.h + 2 * dm.g) * dm.d;
  return dm;
}

inline int window_start(int t, int window) { return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0; }

// RoPE's cos and sin per (position, channel pair), computed once per call with math::rope_row's
// expressions instead of once per head row.
template <class T>
struct RopeTable {
  int half = 0;
  std::vector<T> cs, sn;  // (T, d/2)
  RopeTable(int t, int d, T theta) : half(d / 2) { math::rope_table(cs, sn, t, d, theta); }
  // x (d) at position pos rotated by +angle, or by -angle when inverse (the transpose).
  void apply(T* x, int pos, bool inverse) const {
    const T* c = cs.data() + static_cast<std::size_t>(pos) * half;
    const T* sv = sn.data() + static_cast<std::size_t>(pos) * half;
    for (int i = 0; i < half; ++i) {
      const T s = inverse ? -sv[i] : sv[i];
      const T a = x[i], b = x[i + half];
      x[i] = a * c[i] - b * s;
      x[i + half] = b * c[i] + a * s;
    }
  }
};

}  // namespace

template <class T>
void attention_init(AttentionParams<T>& p, const ModelConfig& cfg, Rng& rng) {
  const int h = cfg.num_heads, g = cfg.num_kv_heads, d = cfg.head_dim;
  p.qkv = Tensor<T>({(h + 2 * g) * d, cfg.hidden});
  p.proj = Tensor<T>({cfg.hidden, h * d});
  for (auto& v : p.qkv.data) v = static_cast<T>(rng.normal() * cfg.init_std);
  for (auto& v : p.proj.data) v = static_cast<T>(rng.normal() * cfg.init_std);
}

template <class T>
void attention_forward(const ModelConfig& cfg, const AttentionParams<T>& p, const Tensor<T>& inp,
                       Tensor<T>& out, AttentionCache<T>& cache, int window) {
  const Dims dm = dims_of(cfg, inp);
  const int n = dm.b * dm.t;
  std::vector<T> qkv(static_cast<std::size_t>(n) * dm.qkv_width);
  cpu::linear_forward<T>(qkv.data(), inp.ptr(), p.qkv.ptr(), nullptr, n, dm.c, dm.qkv_width);

  cache.q = Tensor<T>({dm.b, dm.h, dm.t, dm.d});
  cache.k = Tensor<T>({dm.b, dm.g, dm.t, dm.d});
  cache.v = Tensor<T>({dm.b, dm.g, dm.t, dm.d});
  const RopeTable<T> rope(cfg.rope ? dm.t : 0, dm.d, static_cast<T>(cfg.rope_theta));
  for (int b = 0; b < dm.b; ++b)
    for (int t = 0; t < dm.t; ++t) {
      const T* row = qkv.data() + static_cast<long>(b * dm.t + t) * dm.qkv_width;
      for (int hh = 0; hh < dm.h; ++hh) {
        T* q = cache.q.ptr() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        std::copy_n(row + dm.q_row(hh), dm.d, q);
        if (cfg.rope) rope.apply(q, t, false);
      }
      for (int gg = 0; gg < dm.g; ++gg) {
        T* k = cache.k.ptr() + (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        T* v = cache.v.ptr() + (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        std::copy_n(row + dm.k_row(gg), dm.d, k);
        std::copy_n(row + dm.v_row(gg), dm.d, v);
        if (cfg.rope) rope.apply(k, t, false);
      }
    }

  cache.att = Tensor<T>({dm.b, dm.h, dm.t, dm.t});
  cache.o = Tensor<T>({dm.b, dm.t, dm.h * dm.d});
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  const long tt = static_cast<long>(dm.t) * dm.t;
  std::vector<T> o_bh(static_cast<std::size_t>(dm.t) * dm.d);
  for (int b = 0; b < dm.b; ++b)
    for (int hh = 0; hh < dm.h; ++hh) {
      const int gg = hh / dm.hpg;
      const T* q = cache.q.ptr() + static_cast<long>(b * dm.h + hh) * dm.t * dm.d;
      const T* kb = cache.k.ptr() + static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      const T* vb = cache.v.ptr() + static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      T* att = cache.att.ptr() + static_cast<long>(b * dm.h + hh) * tt;
      // scores (T, T) = q (T, D) k^T; row t keeps [lo, t], scaled, then softmax in place.
      cpu::matmul<T>(att, q, kb, dm.t, dm.t, dm.d, false, true);
      for (int t = 0; t < dm.t; ++t) {
        T* row = att + static_cast<long>(t) * dm.t;
        const int lo = window_start(t, window);
        const int len = t - lo + 1;
        for (int u = lo; u <= t; ++u) row[u] *= scale;
        math::softmax_row(row + lo, row + lo, len);
        std::fill(row, row + lo, T(0));
        std::fill(row + t + 1, row + dm.t, T(0));
      }
      // o (T, D) = att v
      cpu::matmul<T>(o_bh.data(), att, vb, dm.t, dm.d, dm.t);
      for (int t = 0; t < dm.t; ++t)
        std::copy_n(o_bh.data() + static_cast<long>(t) * dm.d, dm.d,
                    cache.o.ptr() + static_cast<long>(b * dm.t + t) * dm.h * dm.d + hh * dm.d);
    }

  if (out.shape != inp.shape) out = Tensor<T>(inp.shape);
  cpu::linear_forward<T>(out.ptr(), cache.o.ptr(), p.proj.ptr(), nullptr, n, dm.h * dm.d, dm.c);
}

template <class T>
void attention_backward(const ModelConfig& cfg, const AttentionParams<T>& p,
                        const AttentionCache<T>& cache, const Tensor<T>& inp,
                        const Tensor<T>& dout, Tensor<T>& dinp, AttentionParams<T>& grads,
                        int window, WgradSink<T>* wgrad) {
  const Dims dm = dims_of(cfg, inp);
  const int n = dm.b * dm.t;
  // forward: out = o proj^T
  std::vector<T> d_o(static_cast<std::size_t>(n) * dm.h * dm.d, T(0));
  cpu::linear_backward<T>(d_o.data(), grads.proj.ptr(), nullptr, dout.ptr(), cache.o.ptr(),
                          p.proj.ptr(), n, dm.h * dm.d, dm.c, wgrad);

  std::vector<T> dq(cache.q.size(), T(0)), dk(cache.k.size(), T(0)), dv(cache.v.size(), T(0));
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  const long tt = static_cast<long>(dm.t) * dm.t;
  std::vector<T> datt(static_cast<std::size_t>(tt)), dscore(static_cast<std::size_t>(tt));
  std::vector<T> do_bh(static_cast<std::size_t>(dm.t) * dm.d);
  for (int b = 0; b < dm.b; ++b)
    for (int hh = 0; hh < dm.h; ++hh) {
      const int gg = hh / dm.hpg;
      const long kv_base = static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      const long q_base = static_cast<long>(b * dm.h + hh) * dm.t * dm.d;
      const T* att = cache.att.ptr() + static_cast<long>(b * dm.h + hh) * tt;
      for (int t = 0; t < dm.t; ++t)
        std::copy_n(d_o.data() + static_cast<long>(b * dm.t + t) * dm.h * dm.d + hh * dm.d, dm.d,
                    do_bh.data() + static_cast<long>(t) * dm.d);
      // forward: o = att v, so datt = do v^T and dv += att^T do
      cpu::matmul<T>(datt.data(), do_bh.data(), cache.v.ptr() + kv_base, dm.t, dm.t, dm.d, false,
                     true);
      cpu::matmul<T>(dv.data() + kv_base, att, do_bh.data(), dm.t, dm.d, dm.t, true, false, true);
      // forward: att = softmax(scale q k^T) on [lo, t] of each row, 0 elsewhere
      std::fill(dscore.begin(), dscore.end(), T(0));
      for (int t = 0; t < dm.t; ++t) {
        const long r = static_cast<long>(t) * dm.t;
        const int lo = window_start(t, window);
        const int len = t - lo + 1;
        math::softmax_row_backward(dscore.data() + r + lo, att + r + lo, datt.data() + r + lo, len);
        for (int u = lo; u <= t; ++u) dscore[static_cast<std::size_t>(r + u)] *= scale;
      }
      // forward: scores = q k^T, so dq = ds k and dk += ds^T q
      cpu::matmul<T>(dq.data() + q_base, dscore.data(), cache.k.ptr() + kv_base, dm.t, dm.d, dm.t);
      cpu::matmul<T>(dk.data() + kv_base, dscore.data(), cache.q.ptr() + q_base, dm.t, dm.d, dm.t,
                     true, false, true);
    }

  // Undo RoPE (its transpose) and scatter back into the fused qkv layout.
  std::vector<T> dqkv(static_cast<std::size_t>(n) * dm.qkv_width, T(0));
  const RopeTable<T> rope(cfg.rope ? dm.t : 0, dm.d, static_cast<T>(cfg.rope_theta));
  for (int b = 0; b < dm.b; ++b)
    for (int t = 0; t < dm.t; ++t) {
      T* row = dqkv.data() + static_cast<long>(b * dm.t + t) * dm.qkv_width;
      for (int hh = 0; hh < dm.h; ++hh) {
        T* src = dq.data() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        if (cfg.rope) rope.apply(src, t, true);
        std::copy_n(src, dm.d, row + dm.q_row(hh));
      }
      for (int gg = 0; gg < dm.g; ++gg) {
        const long off = (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        if (cfg.rope) rope.apply(dk.data() + off, t, true);
        std::copy_n(dk.data() + off, dm.d, row + dm.k_row(gg));
        std::copy_n(dv.data() + off, dm.d, row + dm.v_row(gg));
      }
    }
  cpu::linear_backward<T>(dinp.ptr(), grads.qkv.ptr(), nullptr, dqkv.data(), inp.ptr(),
                          p.qkv.ptr(), n, dm.c, dm.qkv_width, wgrad);
}

#define HT_INSTANTIATE(T)                                                                      \
  template void attention_init<T>(AttentionParams<T>&, const ModelConfig&, Rng&);             \
  template void attention_forward<T>(const ModelConfig&, const AttentionParams<T>&,           \
                                     const Tensor<T>&, Tensor<T>&, AttentionCache<T>&, int);  \
  template void attention_backward<T>(const ModelConfig&, const AttentionParams<T>&,          \
                                      const AttentionCache<T>&, const Tensor<T>&,             \
                                      const Tensor<T>&, Tensor<T>&, AttentionParams<T>&, int, \
                                      WgradSink<T>*);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
