// CUDA layers: multi-head latent attention, the branch of '+', over a device policy D
// (dev/host.hpp); math, shapes and every accumulation order as layers/mla.hpp. Projections are
// GEMMs with the CPU's arguments; a latent RMSNorm row, a (token, head) split with RoPE, and a
// causal score row (dots, softmax, o) each belong to one thread. In the backward a query-row thread
// forms its dscore row and dQ, a key-row thread adds dV and dK over the queries in the CPU's order,
// a token thread adds its heads' rotary dK into the shared kpe gradient, and one thread per norm
// weight adds the tokens in order: no atomics, and the host emulation matches the CPU bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "ht/engine/config.hpp"
#include "ht/engine/cuda/dev/attention.hpp"
#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/wgrad.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

struct MlaDimsD {
  int b, t, c;       // batch, sequence, d_model
  int h;             // heads
  int qr, kvr;       // latent ranks (qr == 0: direct q projection)
  int dn, dr, dv;    // no-position q/k part, rotary part, value head dim
  HT_HD int dq() const { return dn + dr; }
  HT_HD int qud() const { return h * dq(); }        // q projection width
  HT_HD int kvd() const { return kvr + dr; }        // kv_down width: latent | raw kpe
  HT_HD int kvud() const { return h * (dn + dv); }  // kv_up width
  HT_HD long rows() const { return static_cast<long>(b) * t; }
};

// The CPU's own validation (MlaDims::from), then the input shape.
inline MlaDimsD mla_dims(const ModelConfig& cfg, int b, int t, int c) {
  const MlaDims m = MlaDims::from(cfg);
  if (c != m.d_model)
    throw std::invalid_argument("mla: input width " + std::to_string(c) + " != hidden " + std::to_string(m.d_model));
  if (b <= 0 || t <= 0) throw std::invalid_argument("mla: batch and sequence must be positive");
  return MlaDimsD{b, t, c, m.nheads, m.q_lora_rank, m.kv_lora_rank, m.qk_head_dim, m.qk_pos_dim, m.v_head_dim};
}

// Shapes as MlaParams; with qr == 0 only q_proj is read, otherwise only q_down, q_norm, q_up.
template <class T>
struct MlaW {
  const T* q_proj = nullptr;   // (H (dn + dr), C)
  const T* q_down = nullptr;   // (qr, C)
  const T* q_norm = nullptr;   // (qr)
  const T* q_up = nullptr;     // (H (dn + dr), qr)
  const T* kv_down = nullptr;  // (kvr + dr, C)
  const T* kv_norm = nullptr;  // (kvr)
  const T* kv_up = nullptr;    // (H (dn + dv), kvr)
  const T* proj = nullptr;     // (C, H dv)
  bool direct = false;         // q_proj, not the low-rank path (MlaParams' visit reads it)
};
template <class T>
struct MlaGrad {
  T* q_proj = nullptr;
  T* q_down = nullptr;
  T* q_norm = nullptr;
  T* q_up = nullptr;
  T* kv_down = nullptr;
  T* kv_norm = nullptr;
  T* kv_up = nullptr;
  T* proj = nullptr;
  bool direct = false;
};
template <class S>
  requires requires(const S& s) { s.direct; }
bool direct_q(const S& s) {
  return s.direct;
}

template <class D, class T>
struct MlaCacheD {
  Buf<D, T> cq, q_rstd, cqn;     // (N, qr), (N), (N, qr); empty with the direct q projection
  Buf<D, T> ckv, kv_rstd, ckvn;  // (N, kvr + dr), (N), (N, kvr)
  Buf<D, T> Q, K;                // (B, T, H, dn + dr) after RoPE
  Buf<D, T> V;                   // (B, T, H, dv)
  Buf<D, T> att;                 // (B, H, T, T), 0 above the diagonal
  Buf<D, T> o;                   // (B, T, H dv)
  Buf<D, T> cs, sn;              // RoPE table (T, dr/2); empty without RoPE or with dr == 0
};

// mixer::rmsnorm_row_forward / _backward (host-only, engine/src/cpu/layers/mixer_common.hpp) with
// the same expressions; the backward's dw is a separate per-column launch (mla_norm_dw).
template <class T>
HT_HD inline T mla_rms_row_forward(T* out, const T* x, const T* w, int n, T eps) {
  const T r = math::rms_rstd(x, n, eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
  return r;
}
template <class T>
HT_HD inline void mla_rms_row_backward_dx(T* dx, const T* dout, const T* x, const T* w, T rstd, int n) {
  T dot = T(0);
  for (int i = 0; i < n; ++i) dot += dout[i] * w[i] * x[i] * rstd;
  dot /= T(n);
  for (int i = 0; i < n; ++i) {
    const T xh = x[i] * rstd;
    dx[i] += rstd * (dout[i] * w[i] - xh * dot);
  }
}

// The latent norm's backward over N rows: dx rows (stride ldx) and dw accumulate; dout has stride
// n, x stride ldx. dw[i] adds the rows in increasing order, as the CPU's row loop does.
template <class D, class T>
void mla_norm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd, long rows, int n, int ldx) {
  D::launch(rows, [=] HT_HD(long r) {
    mla_rms_row_backward_dx(dx + r * ldx, dout + r * n, x + r * ldx, w, rstd[r], n);
  });
  D::launch(n, [=] HT_HD(long i) {
    T acc = dw[i];
    for (long r = 0; r < rows; ++r) acc += dout[r * n + i] * (x[r * ldx + i] * rstd[r]);
    dw[i] = acc;
  });
}

template <class T>
void mla_check_weights(const MlaDimsD& dm, const T* q_proj, const T* q_down, const T* q_norm, const T* q_up,
                       const char* what) {
  const bool ok = dm.qr == 0 ? q_proj != nullptr : q_down != nullptr && q_norm != nullptr && q_up != nullptr;
  if (!ok)
    throw std::invalid_argument(std::string("mla: ") + what + " do not match mla_q_lora_rank = " +
                                std::to_string(dm.qr));
}

// inp, out (B, T, C); out is overwritten.
template <class D, class T>
void mla_forward(const ModelConfig& cfg, const MlaW<T>& w, const T* inp, T* out, int b, int t, int c,
                 MlaCacheD<D, T>& cache) {
  const MlaDimsD dm = mla_dims(cfg, b, t, c);
  mla_check_weights(dm, w.q_proj, w.q_down, w.q_norm, w.q_up, "parameters");
  const long n = dm.rows();
  const int N = static_cast<int>(n), H = dm.h, qr = dm.qr, kvr = dm.kvr, kvd = dm.kvd();
  const int dn = dm.dn, dr = dm.dr, dq = dm.dq(), dv = dm.dv, qud = dm.qud(), kvud = dm.kvud();
  const T eps = static_cast<T>(cfg.norm_eps);
  const auto sz = [](long a, long b2) { return static_cast<std::size_t>(a * b2); };

  Buf<D, T> qproj_buf(sz(n, qud)), kvproj_buf(sz(n, kvud));
  T* qproj = qproj_buf.get();
  T* kvproj = kvproj_buf.get();
  cache.cq.resize(sz(n, qr));
  cache.q_rstd.resize(qr > 0 ? sz(n, 1) : 0);
  cache.cqn.resize(sz(n, qr));
  if (qr == 0) {
    D::gemm(qproj, inp, w.q_proj, N, qud, c, false, true, false);
  } else {
    T* cq = cache.cq.get();
    T* q_rstd = cache.q_rstd.get();
    T* cqn = cache.cqn.get();
    const T* q_norm = w.q_norm;
    D::gemm(cq, inp, w.q_down, N, qr, c, false, true, false);
    D::launch(n, [=] HT_HD(long r) { q_rstd[r] = mla_rms_row_forward(cqn + r * qr, cq + r * qr, q_norm, qr, eps); });
    D::gemm(qproj, cqn, w.q_up, N, qud, qr, false, true, false);
  }
  cache.ckv.resize(sz(n, kvd));
  cache.kv_rstd.resize(sz(n, 1));
  cache.ckvn.resize(sz(n, kvr));
  T* ckv = cache.ckv.get();
  T* kv_rstd = cache.kv_rstd.get();
  T* ckvn = cache.ckvn.get();
  const T* kv_norm = w.kv_norm;
  D::gemm(ckv, inp, w.kv_down, N, kvd, c, false, true, false);
  // The norm reads the latent part of each kv_down row only; the rest is the raw kpe.
  D::launch(n, [=] HT_HD(long r) { kv_rstd[r] = mla_rms_row_forward(ckvn + r * kvr, ckv + r * kvd, kv_norm, kvr, eps); });
  D::gemm(kvproj, ckvn, w.kv_up, N, kvud, kvr, false, true, false);

  // The CPU calls math::rope_row per vector; the table holds the same expressions' bits.
  const bool rope = cfg.rope && dr > 0;
  if (rope) {
    rope_table(cache.cs, cache.sn, t, dr, static_cast<T>(cfg.rope_theta));
  } else {
    cache.cs.resize(0);
    cache.sn.resize(0);
  }
  const T* cs = rope ? cache.cs.get() : nullptr;
  const T* sn = rope ? cache.sn.get() : nullptr;
  cache.Q.resize(sz(n * H, dq));
  cache.K.resize(sz(n * H, dq));
  cache.V.resize(sz(n * H, dv));
  T *Q = cache.Q.get(), *K = cache.K.get(), *V = cache.V.get();
  // One thread per (token, head). kpe is shared by the heads: each rotates its own copy, which gives
  // the bits of the CPU's rotate-once-then-copy.
  D::launch(n * H, [=] HT_HD(long i) {
    const long r = i / H;
    const int hh = static_cast<int>(i % H), pos = static_cast<int>(r % t);
    T* Qh = Q + i * dq;
    T* Kh = K + i * dq;
    T* Vh = V + i * dv;
    const T* qh = qproj + r * qud + static_cast<long>(hh) * dq;
    const T* kvh = kvproj + r * kvud + static_cast<long>(hh) * (dn + dv);
    const T* kpe = ckv + r * kvd + kvr;
    for (int j = 0; j < dq; ++j) Qh[j] = qh[j];
    for (int j = 0; j < dn; ++j) Kh[j] = kvh[j];
    for (int j = 0; j < dr; ++j) Kh[dn + j] = kpe[j];
    for (int j = 0; j < dv; ++j) Vh[j] = kvh[dn + j];
    rope_apply(Qh + dn, cs, sn, pos, dr, false);
    rope_apply(Kh + dn, cs, sn, pos, dr, false);
  });

  cache.att.resize(sz(static_cast<long>(b) * H * t, t));
  cache.o.resize(sz(n, static_cast<long>(H) * dv));
  T* att = cache.att.get();
  T* o = cache.o.get();
  const T scale = T(1) / std::sqrt(static_cast<T>(dq));
  // One thread per (batch, head, query): the CPU's loop body. Its softmax divides by the sum
  // (math::softmax_row multiplies by the inverse), so it is spelled out here.
  D::launch(static_cast<long>(b) * H * t, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % t), hh = static_cast<int>((i / t) % H);
    const long bb = i / (static_cast<long>(t) * H);
    const T* q = Q + ((bb * t + tq) * H + hh) * dq;
    T* a = att + i * t;
    T mx = -INFINITY;
    for (int s = 0; s <= tq; ++s) {
      const T* k = K + ((bb * t + s) * H + hh) * dq;
      T acc = T(0);
      for (int j = 0; j < dq; ++j) acc += q[j] * k[j];
      a[s] = acc * scale;
      mx = mx < a[s] ? a[s] : mx;  // std::max's choice, without a host-only call
    }
    T sum = T(0);
    for (int s = 0; s <= tq; ++s) {
      a[s] = std::exp(a[s] - mx);
      sum += a[s];
    }
    for (int s = 0; s <= tq; ++s) a[s] /= sum;
    for (int s = tq + 1; s < t; ++s) a[s] = T(0);
    T* oh = o + (bb * t + tq) * H * dv + static_cast<long>(hh) * dv;
    for (int j = 0; j < dv; ++j) oh[j] = T(0);
    for (int s = 0; s <= tq; ++s) {
      const T* v = V + ((bb * t + s) * H + hh) * dv;
      for (int j = 0; j < dv; ++j) oh[j] += a[s] * v[j];
    }
  });
  D::gemm(out, o, w.proj, N, c, H * dv, false, true, false);
}

// dinp and the weight gradients accumulate (+=).
template <class D, class T>
void mla_backward(const ModelConfig& cfg, const MlaW<T>& w, const MlaCacheD<D, T>& cache, const T* inp,
                  const T* dout, T* dinp, const MlaGrad<T>& grads, int b, int t, int c,
                  WgradSink<T>* wgrad = nullptr) {
  const MlaDimsD dm = mla_dims(cfg, b, t, c);
  mla_check_weights(dm, w.q_proj, w.q_down, w.q_norm, w.q_up, "parameters");
  mla_check_weights<T>(dm, grads.q_proj, grads.q_down, grads.q_norm, grads.q_up, "gradients");
  const long n = dm.rows();
  const int N = static_cast<int>(n), H = dm.h, qr = dm.qr, kvr = dm.kvr, kvd = dm.kvd();
  const int dn = dm.dn, dr = dm.dr, dq = dm.dq(), dv = dm.dv, qud = dm.qud(), kvud = dm.kvud();
  const auto sz = [](long a, long b2) { return static_cast<std::size_t>(a * b2); };

  // forward: out = o W_o^T (d_o starts at 0 and accumulates, as linear_backward)
  Buf<D, T> d_o_buf;
  d_o_buf.assign_zero(sz(n, static_cast<long>(H) * dv));
  T* d_o = d_o_buf.get();
  D::gemm(d_o, dout, w.proj, N, H * dv, c, false, false, true);
  weight_gemm<D, T>(grads.proj, dout, cache.o.get(), N, H * dv, c, wgrad);

  // forward: o_t = sum_s att[t,s] V_s, att = softmax(scale Q_t K_s), s <= t
  const T scale = T(1) / std::sqrt(static_cast<T>(dq));
  const long rows = static_cast<long>(b) * H * t;
  Buf<D, T> ds_buf(sz(rows, t)), dQ_buf(sz(n * H, dq)), dK_buf(sz(n * H, dq)), dV_buf(sz(n * H, dv));
  T *ds = ds_buf.get(), *dQ = dQ_buf.get(), *dK = dK_buf.get(), *dV = dV_buf.get();
  const T *att = cache.att.get(), *Q = cache.Q.get(), *K = cache.K.get(), *V = cache.V.get();
  // Query rows: datt, the softmax backward (its dot in key order) and dQ_t = sum_s ds_ts K_s.
  // Entries of ds above the diagonal are never read.
  D::launch(rows, [=] HT_HD(long i) {
    const int tq = static_cast<int>(i % t), hh = static_cast<int>((i / t) % H);
    const long bb = i / (static_cast<long>(t) * H);
    const T* a = att + i * t;
    const T* dot = d_o + (bb * t + tq) * H * dv + static_cast<long>(hh) * dv;
    T* d = ds + i * t;
    T sum = T(0);
    for (int s = 0; s <= tq; ++s) {
      const T* v = V + ((bb * t + s) * H + hh) * dv;
      T acc = T(0);
      for (int j = 0; j < dv; ++j) acc += dot[j] * v[j];
      d[s] = acc;
      sum += a[s] * acc;
    }
    for (int s = 0; s <= tq; ++s) d[s] = a[s] * (d[s] - sum) * scale;
    T* dqt = dQ + ((bb * t + tq) * H + hh) * dq;
    for (int j = 0; j < dq; ++j) dqt[j] = T(0);
    for (int s = 0; s <= tq; ++s) {
      const T* k = K + ((bb * t + s) * H + hh) * dq;
      for (int j = 0; j < dq; ++j) dqt[j] += d[s] * k[j];
    }
  });
  // Key rows: dV_s and dK_s add the queries t >= s in increasing t, the CPU's outer loop order.
  D::launch(rows, [=] HT_HD(long i) {
    const int s = static_cast<int>(i % t), hh = static_cast<int>((i / t) % H);
    const long bb = i / (static_cast<long>(t) * H);
    const long si = (bb * t + s) * H + hh;
    T* dvs = dV + si * dv;
    T* dks = dK + si * dq;
    for (int j = 0; j < dv; ++j) dvs[j] = T(0);
    for (int j = 0; j < dq; ++j) dks[j] = T(0);
    for (int tq = s; tq < t; ++tq) {
      const long qrow = (bb * H + hh) * t + tq;  // (b, h, tq) row of att and ds
      const T a = att[qrow * t + s];
      const T d = ds[qrow * t + s];
      const T* dot = d_o + (bb * t + tq) * H * dv + static_cast<long>(hh) * dv;
      const T* q = Q + ((bb * t + tq) * H + hh) * dq;
      for (int j = 0; j < dv; ++j) dvs[j] += a * dot[j];
      for (int j = 0; j < dq; ++j) dks[j] += d * q[j];
    }
  });

  // forward: Q = [q_nope | rope(q_pe)], K = [k_nope | rope(kpe)], V from kv. The projection
  // gradients start at 0 and accumulate, as the CPU's (a copy would differ for -0 only).
  Buf<D, T> dqproj_buf, dkvproj_buf, dckv_buf;
  dqproj_buf.assign_zero(sz(n, qud));
  dkvproj_buf.assign_zero(sz(n, kvud));
  dckv_buf.assign_zero(sz(n, kvd));
  T *dqproj = dqproj_buf.get(), *dkvproj = dkvproj_buf.get(), *dckv = dckv_buf.get();
  const bool rope = cfg.rope && dr > 0;
  const T* cs = rope ? cache.cs.get() : nullptr;
  const T* sn = rope ? cache.sn.get() : nullptr;
  // One thread per (token, head); the rotary parts of dQ and dK are un-rotated in place (scratch).
  D::launch(n * H, [=] HT_HD(long i) {
    const long r = i / H;
    const int hh = static_cast<int>(i % H), pos = static_cast<int>(r % t);
    T* dQh = dQ + i * dq;
    T* dKh = dK + i * dq;
    const T* dVh = dV + i * dv;
    T* dqh = dqproj + r * qud + static_cast<long>(hh) * dq;
    T* dkvh = dkvproj + r * kvud + static_cast<long>(hh) * (dn + dv);
    for (int j = 0; j < dn; ++j) {
      dqh[j] += dQh[j];
      dkvh[j] += dKh[j];
    }
    for (int j = 0; j < dv; ++j) dkvh[dn + j] += dVh[j];
    rope_apply(dQh + dn, cs, sn, pos, dr, true);
    for (int j = 0; j < dr; ++j) dqh[dn + j] += dQh[dn + j];
    rope_apply(dKh + dn, cs, sn, pos, dr, true);
  });
  // kpe is shared by the heads: one thread per token adds them in head order.
  if (dr > 0)
    D::launch(n, [=] HT_HD(long r) {
      T* dkpe = dckv + r * kvd + kvr;
      for (int hh = 0; hh < H; ++hh) {
        const T* src = dK + (r * H + hh) * dq + dn;
        for (int j = 0; j < dr; ++j) dkpe[j] += src[j];
      }
    });

  if (qr == 0) {
    // forward: q = inp W_q^T
    D::gemm(dinp, dqproj, w.q_proj, N, c, qud, false, false, true);
    weight_gemm<D, T>(grads.q_proj, dqproj, inp, N, c, qud, wgrad);
  } else {
    // forward: q = cqn W_qu^T, cqn = rmsnorm(cq) * q_norm, cq = inp W_qd^T
    Buf<D, T> dcqn_buf, dcq_buf;
    dcqn_buf.assign_zero(sz(n, qr));
    dcq_buf.assign_zero(sz(n, qr));
    D::gemm(dcqn_buf.get(), dqproj, w.q_up, N, qr, qud, false, false, true);
    weight_gemm<D, T>(grads.q_up, dqproj, cache.cqn.get(), N, qr, qud, wgrad);
    mla_norm_backward<D, T>(dcq_buf.get(), grads.q_norm, dcqn_buf.get(), cache.cq.get(), w.q_norm,
                            cache.q_rstd.get(), n, qr, qr);
    D::gemm(dinp, dcq_buf.get(), w.q_down, N, c, qr, false, false, true);
    weight_gemm<D, T>(grads.q_down, dcq_buf.get(), inp, N, c, qr, wgrad);
  }
  // forward: kv = ckvn W_kvu^T, ckvn = rmsnorm(ckv latent) * kv_norm, ckv = inp W_kvd^T
  Buf<D, T> dckvn_buf;
  dckvn_buf.assign_zero(sz(n, kvr));
  D::gemm(dckvn_buf.get(), dkvproj, w.kv_up, N, kvr, kvud, false, false, true);
  weight_gemm<D, T>(grads.kv_up, dkvproj, cache.ckvn.get(), N, kvr, kvud, wgrad);
  mla_norm_backward<D, T>(dckv, grads.kv_norm, dckvn_buf.get(), cache.ckv.get(), w.kv_norm, cache.kv_rstd.get(), n,
                          kvr, kvd);
  D::gemm(dinp, dckv, w.kv_down, N, c, kvd, false, false, true);
  weight_gemm<D, T>(grads.kv_down, dckv, inp, N, c, kvd, wgrad);
}

}  // namespace ht::engine::dev
