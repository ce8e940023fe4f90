// CPU reference causal GQA attention with RoPE and an optional window (see attention.hpp).
// Plain loops over (batch, head, query): every sum has one fixed order, so the result is the same
// bits on every run; the GEMMs on either side go through cpu::matmul.
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
  const T theta = static_cast<T>(cfg.rope_theta);
  for (int b = 0; b < dm.b; ++b)
    for (int t = 0; t < dm.t; ++t) {
      const T* row = qkv.data() + static_cast<long>(b * dm.t + t) * dm.qkv_width;
      for (int hh = 0; hh < dm.h; ++hh) {
        T* q = cache.q.ptr() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        std::copy_n(row + dm.q_row(hh), dm.d, q);
        if (cfg.rope) math::rope_row(q, dm.d, t, theta, false);
      }
      for (int gg = 0; gg < dm.g; ++gg) {
        T* k = cache.k.ptr() + (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        T* v = cache.v.ptr() + (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        std::copy_n(row + dm.k_row(gg), dm.d, k);
        std::copy_n(row + dm.v_row(gg), dm.d, v);
        if (cfg.rope) math::rope_row(k, dm.d, t, theta, false);
      }
    }

  cache.att = Tensor<T>({dm.b, dm.h, dm.t, dm.t});
  cache.o = Tensor<T>({dm.b, dm.t, dm.h * dm.d});
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  std::vector<T> scores(static_cast<std::size_t>(dm.t));
  for (int b = 0; b < dm.b; ++b)
    for (int hh = 0; hh < dm.h; ++hh) {
      const int gg = hh / dm.hpg;
      const T* kb = cache.k.ptr() + static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      const T* vb = cache.v.ptr() + static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      for (int t = 0; t < dm.t; ++t) {
        const T* q = cache.q.ptr() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        const int lo = window_start(t, window);
        const int len = t - lo + 1;
        for (int u = lo; u <= t; ++u) {
          T s = T(0);
          for (int i = 0; i < dm.d; ++i) s += q[i] * kb[static_cast<long>(u) * dm.d + i];
          scores[static_cast<std::size_t>(u - lo)] = s * scale;
        }
        T* att = cache.att.ptr() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.t;
        math::softmax_row(att + lo, scores.data(), len);
        T* o = cache.o.ptr() + static_cast<long>(b * dm.t + t) * dm.h * dm.d + hh * dm.d;
        for (int u = lo; u <= t; ++u) {
          const T a = att[u];
          const T* v = vb + static_cast<long>(u) * dm.d;
          for (int i = 0; i < dm.d; ++i) o[i] += a * v[i];
        }
      }
    }

  if (out.shape != inp.shape) out = Tensor<T>(inp.shape);
  cpu::linear_forward<T>(out.ptr(), cache.o.ptr(), p.proj.ptr(), nullptr, n, dm.h * dm.d, dm.c);
}

template <class T>
void attention_backward(const ModelConfig& cfg, const AttentionParams<T>& p,
                        const AttentionCache<T>& cache, const Tensor<T>& inp,
                        const Tensor<T>& dout, Tensor<T>& dinp, AttentionParams<T>& grads,
                        int window) {
  const Dims dm = dims_of(cfg, inp);
  const int n = dm.b * dm.t;
  // forward: out = o proj^T
  std::vector<T> d_o(static_cast<std::size_t>(n) * dm.h * dm.d, T(0));
  cpu::linear_backward<T>(d_o.data(), grads.proj.ptr(), nullptr, dout.ptr(), cache.o.ptr(),
                          p.proj.ptr(), n, dm.h * dm.d, dm.c);

  std::vector<T> dq(cache.q.size(), T(0)), dk(cache.k.size(), T(0)), dv(cache.v.size(), T(0));
  const T scale = T(1) / std::sqrt(static_cast<T>(dm.d));
  std::vector<T> datt(static_cast<std::size_t>(dm.t)), dscore(static_cast<std::size_t>(dm.t));
  for (int b = 0; b < dm.b; ++b)
    for (int hh = 0; hh < dm.h; ++hh) {
      const int gg = hh / dm.hpg;
      const long kv_base = static_cast<long>(b * dm.g + gg) * dm.t * dm.d;
      for (int t = 0; t < dm.t; ++t) {
        const long q_off = (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        const T* att = cache.att.ptr() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.t;
        const T* dot_row = d_o.data() + static_cast<long>(b * dm.t + t) * dm.h * dm.d + hh * dm.d;
        const int lo = window_start(t, window);
        const int len = t - lo + 1;
        // forward: o_t = sum_u att_u v_u
        for (int u = lo; u <= t; ++u) {
          const T* v = cache.v.ptr() + kv_base + static_cast<long>(u) * dm.d;
          T* dvu = dv.data() + kv_base + static_cast<long>(u) * dm.d;
          T s = T(0);
          for (int i = 0; i < dm.d; ++i) {
            s += dot_row[i] * v[i];
            dvu[i] += att[u] * dot_row[i];
          }
          datt[static_cast<std::size_t>(u - lo)] = s;
        }
        // forward: att = softmax(scores)
        std::fill_n(dscore.begin(), len, T(0));
        math::softmax_row_backward(dscore.data(), att + lo, datt.data(), len);
        // forward: score_u = scale q_t . k_u
        const T* q = cache.q.ptr() + q_off;
        T* dqt = dq.data() + q_off;
        for (int u = lo; u <= t; ++u) {
          const T ds = dscore[static_cast<std::size_t>(u - lo)] * scale;
          const T* k = cache.k.ptr() + kv_base + static_cast<long>(u) * dm.d;
          T* dku = dk.data() + kv_base + static_cast<long>(u) * dm.d;
          for (int i = 0; i < dm.d; ++i) {
            dqt[i] += ds * k[i];
            dku[i] += ds * q[i];
          }
        }
      }
    }

  // Undo RoPE (its transpose) and scatter back into the fused qkv layout.
  std::vector<T> dqkv(static_cast<std::size_t>(n) * dm.qkv_width, T(0));
  const T theta = static_cast<T>(cfg.rope_theta);
  for (int b = 0; b < dm.b; ++b)
    for (int t = 0; t < dm.t; ++t) {
      T* row = dqkv.data() + static_cast<long>(b * dm.t + t) * dm.qkv_width;
      for (int hh = 0; hh < dm.h; ++hh) {
        T* src = dq.data() + (static_cast<long>(b * dm.h + hh) * dm.t + t) * dm.d;
        if (cfg.rope) math::rope_row(src, dm.d, t, theta, true);
        std::copy_n(src, dm.d, row + dm.q_row(hh));
      }
      for (int gg = 0; gg < dm.g; ++gg) {
        const long off = (static_cast<long>(b * dm.g + gg) * dm.t + t) * dm.d;
        if (cfg.rope) math::rope_row(dk.data() + off, dm.d, t, theta, true);
        std::copy_n(dk.data() + off, dm.d, row + dm.k_row(gg));
        std::copy_n(dv.data() + off, dm.d, row + dm.v_row(gg));
      }
    }
  cpu::linear_backward<T>(dinp.ptr(), grads.qkv.ptr(), nullptr, dqkv.data(), inp.ptr(),
                          p.qkv.ptr(), n, dm.c, dm.qkv_width);
}

#define HT_INSTANTIATE(T)                                                                      \
  template void attention_init<T>(AttentionParams<T>&, const ModelConfig&, Rng&);             \
  template void attention_forward<T>(const ModelConfig&, const AttentionParams<T>&,           \
                                     const Tensor<T>&, Tensor<T>&, AttentionCache<T>&, int);  \
  template void attention_backward<T>(const ModelConfig&, const AttentionParams<T>&,          \
                                      const AttentionCache<T>&, const Tensor<T>&,             \
                                      const Tensor<T>&, Tensor<T>&, AttentionParams<T>&, int);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
