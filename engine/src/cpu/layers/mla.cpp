// CPU reference multi-head latent attention (see mla.hpp for the math, shapes and stated
// choices). Plain loops for the attention core; every projection goes through cpu::linear_*.
#include "ht/engine/layers/mla.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"
#include "mixer_common.hpp"

namespace ht::engine {

MlaDims MlaDims::from(const ModelConfig& cfg) {
  MlaDims d;
  d.d_model = cfg.hidden;
  d.nheads = cfg.num_heads;
  d.q_lora_rank = cfg.mla_q_lora_rank;
  d.kv_lora_rank = cfg.mla_kv_lora_rank;
  d.qk_head_dim = cfg.mla_qk_head_dim;
  d.qk_pos_dim = cfg.mla_qk_pos_head_dim;
  d.v_head_dim = cfg.mla_v_head_dim;
  mixer::require_positive(d.d_model, "hidden", "mla");
  mixer::require_positive(d.nheads, "num_heads", "mla");
  if (d.q_lora_rank < 0)
    throw std::invalid_argument(
        "mla: mla_q_lora_rank must be >= 0 (0 = direct q projection), got " +
        std::to_string(d.q_lora_rank));
  mixer::require_positive(d.kv_lora_rank, "mla_kv_lora_rank", "mla");
  mixer::require_positive(d.qk_head_dim, "mla_qk_head_dim", "mla");
  mixer::require_positive(d.v_head_dim, "mla_v_head_dim", "mla");
  if (d.qk_pos_dim < 0 || d.qk_pos_dim % 2 != 0)
    throw std::invalid_argument("mla: mla_qk_pos_head_dim must be even and >= 0, got " +
                                std::to_string(d.qk_pos_dim));
  return d;
}

std::size_t mla_param_count(const ModelConfig& cfg) {
  const MlaDims c = MlaDims::from(cfg);
  auto n = [](long a, long b) { return static_cast<std::size_t>(a * b); };
  const std::size_t q = c.q_lora_rank == 0
                            ? n(c.q_up_dim(), c.d_model)
                            : n(c.q_lora_rank, c.d_model + 1) + n(c.q_up_dim(), c.q_lora_rank);
  return q + n(c.kv_down_dim(), c.d_model) + n(c.kv_lora_rank, 1) +
         n(c.kv_up_dim(), c.kv_lora_rank) + n(c.d_model, c.nheads * c.v_head_dim);
}

template <class T>
void mla_init(MlaParams<T>& p, const ModelConfig& cfg, Rng& rng) {
  const MlaDims c = MlaDims::from(cfg);
  p = MlaParams<T>{};
  if (c.q_lora_rank == 0) {
    p.q_proj = Tensor<T>({c.q_up_dim(), c.d_model});
  } else {
    p.q_down = Tensor<T>({c.q_lora_rank, c.d_model});
    p.q_norm = Tensor<T>({c.q_lora_rank});
    p.q_up = Tensor<T>({c.q_up_dim(), c.q_lora_rank});
  }
  p.kv_down = Tensor<T>({c.kv_down_dim(), c.d_model});
  p.kv_norm = Tensor<T>({c.kv_lora_rank});
  p.kv_up = Tensor<T>({c.kv_up_dim(), c.kv_lora_rank});
  p.proj = Tensor<T>({c.d_model, c.nheads * c.v_head_dim});
  mixer::fill_normal(p.q_proj, rng, cfg.init_std);
  mixer::fill_normal(p.q_down, rng, cfg.init_std);
  mixer::fill_constant(p.q_norm, 1.0);
  mixer::fill_normal(p.q_up, rng, cfg.init_std);
  mixer::fill_normal(p.kv_down, rng, cfg.init_std);
  mixer::fill_constant(p.kv_norm, 1.0);
  mixer::fill_normal(p.kv_up, rng, cfg.init_std);
  mixer::fill_normal(p.proj, rng, cfg.init_std);
}

namespace {

// out = rope(in) at position t (or its transpose when inverse: the rotation's backward), or a
// plain copy when cfg.rope is off.
template <class T>
void rope_copy(const ModelConfig& cfg, T* out, const T* in, int dr, int t, bool inverse) {
  std::copy(in, in + dr, out);
  if (cfg.rope) math::rope_row(out, dr, t, static_cast<T>(cfg.rope_theta), inverse);
}

}  // namespace

template <class T>
void mla_forward(const ModelConfig& cfg, const MlaParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MlaCache<T>& cache) {
  const MlaDims c = MlaDims::from(cfg);
  if (inp.rank() != 3 || inp.dim(2) != c.d_model)
    throw std::invalid_argument("mla_forward: inp must be (B, T, " + std::to_string(c.d_model) +
                                ")");
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn, H = c.nheads;
  const int qr = c.q_lora_rank, kvr = c.kv_lora_rank, dn = c.qk_head_dim, dr = c.qk_pos_dim;
  const int dq = c.qk_dim(), dv = c.v_head_dim, KVD = c.kv_down_dim();
  const T eps = static_cast<T>(cfg.norm_eps);
  if (qr == 0 ? p.q_proj.size() != static_cast<std::size_t>(c.q_up_dim()) * c.d_model
              : p.q_up.size() != static_cast<std::size_t>(c.q_up_dim()) * qr)
    throw std::invalid_argument("mla_forward: parameters do not match mla_q_lora_rank = " +
                                std::to_string(qr));
  cache.cq = Tensor<T>({B, Tn, qr});
  cache.q_rstd = Tensor<T>({B, Tn});
  cache.cqn = Tensor<T>({B, Tn, qr});
  cache.ckv = Tensor<T>({B, Tn, KVD});
  cache.kv_rstd = Tensor<T>({B, Tn});
  cache.ckvn = Tensor<T>({B, Tn, kvr});
  cache.Q = Tensor<T>({B, Tn, H, dq});
  cache.K = Tensor<T>({B, Tn, H, dq});
  cache.V = Tensor<T>({B, Tn, H, dv});
  cache.att = Tensor<T>({B, H, Tn, Tn});
  cache.o = Tensor<T>({B, Tn, H * dv});
  out = Tensor<T>({B, Tn, c.d_model});

  Tensor<T> qproj({B, Tn, c.q_up_dim()}), kvproj({B, Tn, c.kv_up_dim()});
  if (qr == 0) {
    cpu::linear_forward(qproj.ptr(), inp.ptr(), p.q_proj.ptr(), (const T*)nullptr, N, c.d_model,
                        c.q_up_dim());
  } else {
    cpu::linear_forward(cache.cq.ptr(), inp.ptr(), p.q_down.ptr(), (const T*)nullptr, N, c.d_model,
                        qr);
    for (int r = 0; r < N; r++)
      cache.q_rstd[r] = mixer::rmsnorm_row_forward(
          cache.cqn.ptr() + static_cast<std::size_t>(r) * qr,
          cache.cq.ptr() + static_cast<std::size_t>(r) * qr, p.q_norm.ptr(), qr, eps);
    cpu::linear_forward(qproj.ptr(), cache.cqn.ptr(), p.q_up.ptr(), (const T*)nullptr, N, qr,
                        c.q_up_dim());
  }
  cpu::linear_forward(cache.ckv.ptr(), inp.ptr(), p.kv_down.ptr(), (const T*)nullptr, N, c.d_model,
                      KVD);
  for (int r = 0; r < N; r++)
    cache.kv_rstd[r] = mixer::rmsnorm_row_forward(
        cache.ckvn.ptr() + static_cast<std::size_t>(r) * kvr,
        cache.ckv.ptr() + static_cast<std::size_t>(r) * KVD, p.kv_norm.ptr(), kvr, eps);
  cpu::linear_forward(kvproj.ptr(), cache.ckvn.ptr(), p.kv_up.ptr(), (const T*)nullptr, N, kvr,
                      c.kv_up_dim());
  std::vector<T> kpe(static_cast<std::size_t>(dr));
  for (int r = 0; r < N; r++) {
    const int t = r % Tn;
    if (dr > 0)
      rope_copy(cfg, kpe.data(), cache.ckv.ptr() + static_cast<std::size_t>(r) * KVD + kvr, dr, t,
                false);
    for (int h = 0; h < H; h++) {
      T* Qh = cache.Q.ptr() + (static_cast<std::size_t>(r) * H + h) * dq;
      T* Kh = cache.K.ptr() + (static_cast<std::size_t>(r) * H + h) * dq;
      T* Vh = cache.V.ptr() + (static_cast<std::size_t>(r) * H + h) * dv;
      const T* qh = qproj.ptr() + static_cast<std::size_t>(r) * c.q_up_dim() + h * dq;
      const T* kvh = kvproj.ptr() + static_cast<std::size_t>(r) * c.kv_up_dim() + h * (dn + dv);
      std::copy(qh, qh + dn, Qh);
      if (dr > 0) rope_copy(cfg, Qh + dn, qh + dn, dr, t, false);
      std::copy(kvh, kvh + dn, Kh);
      std::copy(kpe.begin(), kpe.end(), Kh + dn);
      std::copy(kvh + dn, kvh + dn + dv, Vh);
    }
  }
  const T scale = T(1) / std::sqrt(static_cast<T>(dq));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < Tn; t++) {
        const T* q = cache.Q.ptr() + ((static_cast<std::size_t>(b) * Tn + t) * H + h) * dq;
        T* a = cache.att.ptr() + ((static_cast<std::size_t>(b) * H + h) * Tn + t) * Tn;
        T mx = -INFINITY;
        for (int s = 0; s <= t; s++) {
          const T* k = cache.K.ptr() + ((static_cast<std::size_t>(b) * Tn + s) * H + h) * dq;
          T acc = 0;
          for (int j = 0; j < dq; j++) acc += q[j] * k[j];
          a[s] = acc * scale;
          mx = std::max(mx, a[s]);
        }
        T sum = 0;
        for (int s = 0; s <= t; s++) {
          a[s] = std::exp(a[s] - mx);
          sum += a[s];
        }
        for (int s = 0; s <= t; s++) a[s] /= sum;
        T* o = cache.o.ptr() + (static_cast<std::size_t>(b) * Tn + t) * H * dv + h * dv;
        for (int s = 0; s <= t; s++) {
          const T* v = cache.V.ptr() + ((static_cast<std::size_t>(b) * Tn + s) * H + h) * dv;
          for (int j = 0; j < dv; j++) o[j] += a[s] * v[j];
        }
      }
  cpu::linear_forward(out.ptr(), cache.o.ptr(), p.proj.ptr(), (const T*)nullptr, N, H * dv,
                      c.d_model);
}

template <class T>
void mla_backward(const ModelConfig& cfg, const MlaParams<T>& p, const MlaCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  MlaParams<T>& grads, WgradSink<T>* wgrad) {
  const MlaDims c = MlaDims::from(cfg);
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn, H = c.nheads;
  const int qr = c.q_lora_rank, kvr = c.kv_lora_rank, dn = c.qk_head_dim, dr = c.qk_pos_dim;
  const int dq = c.qk_dim(), dv = c.v_head_dim, KVD = c.kv_down_dim();
  Tensor<T> d_o({B, Tn, H * dv});
  Tensor<T> dQ({B, Tn, H, dq}), dK({B, Tn, H, dq}), dV({B, Tn, H, dv});

  // forward: out = o W_o^T
  cpu::linear_backward(d_o.ptr(), grads.proj.ptr(), (T*)nullptr, dout.ptr(), cache.o.ptr(),
                       p.proj.ptr(), N, H * dv, c.d_model, wgrad);
  // forward: o_t = sum_s att[t,s] V_s, att = softmax(scale Q_t K_s), s <= t
  const T scale = T(1) / std::sqrt(static_cast<T>(dq));
  std::vector<T> datt(static_cast<std::size_t>(Tn));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < Tn; t++) {
        const std::size_t qi = ((static_cast<std::size_t>(b) * Tn + t) * H + h);
        const T* a = cache.att.ptr() + ((static_cast<std::size_t>(b) * H + h) * Tn + t) * Tn;
        const T* dot = d_o.ptr() + (static_cast<std::size_t>(b) * Tn + t) * H * dv + h * dv;
        T sum = 0;
        for (int s = 0; s <= t; s++) {
          const std::size_t si = ((static_cast<std::size_t>(b) * Tn + s) * H + h);
          const T* v = cache.V.ptr() + si * dv;
          T* dvs = dV.ptr() + si * dv;
          T acc = 0;
          for (int j = 0; j < dv; j++) {
            acc += dot[j] * v[j];
            dvs[j] += a[s] * dot[j];
          }
          datt[s] = acc;
          sum += a[s] * acc;
        }
        // softmax backward: dscore = att * (datt - sum_s att datt)
        for (int s = 0; s <= t; s++) {
          const std::size_t si = ((static_cast<std::size_t>(b) * Tn + s) * H + h);
          T ds = a[s] * (datt[s] - sum) * scale;
          const T* q = cache.Q.ptr() + qi * dq;
          const T* k = cache.K.ptr() + si * dq;
          T* dqt = dQ.ptr() + qi * dq;
          T* dks = dK.ptr() + si * dq;
          for (int j = 0; j < dq; j++) {
            dqt[j] += ds * k[j];
            dks[j] += ds * q[j];
          }
        }
      }
  // forward: Q = [q_nope | rope(q_pe)], K = [k_nope | rope(kpe)], V from kv
  Tensor<T> dqproj({B, Tn, c.q_up_dim()}), dkvproj({B, Tn, c.kv_up_dim()});
  Tensor<T> dckv({B, Tn, KVD});
  std::vector<T> tmp(static_cast<std::size_t>(dr));
  for (int r = 0; r < N; r++) {
    const int t = r % Tn;
    for (int h = 0; h < H; h++) {
      const T* dQh = dQ.ptr() + (static_cast<std::size_t>(r) * H + h) * dq;
      const T* dKh = dK.ptr() + (static_cast<std::size_t>(r) * H + h) * dq;
      const T* dVh = dV.ptr() + (static_cast<std::size_t>(r) * H + h) * dv;
      T* dqh = dqproj.ptr() + static_cast<std::size_t>(r) * c.q_up_dim() + h * dq;
      T* dkvh = dkvproj.ptr() + static_cast<std::size_t>(r) * c.kv_up_dim() + h * (dn + dv);
      for (int j = 0; j < dn; j++) {
        dqh[j] += dQh[j];
        dkvh[j] += dKh[j];
      }
      for (int j = 0; j < dv; j++) dkvh[dn + j] += dVh[j];
      if (dr > 0) {
        rope_copy(cfg, tmp.data(), dQh + dn, dr, t, true);
        for (int j = 0; j < dr; j++) dqh[dn + j] += tmp[j];
        rope_copy(cfg, tmp.data(), dKh + dn, dr, t, true);
        T* dkpe = dckv.ptr() + static_cast<std::size_t>(r) * KVD + kvr;
        for (int j = 0; j < dr; j++) dkpe[j] += tmp[j];
      }
    }
  }
  if (qr == 0) {
    // forward: q = inp W_q^T
    cpu::linear_backward(dinp.ptr(), grads.q_proj.ptr(), (T*)nullptr, dqproj.ptr(), inp.ptr(),
                         p.q_proj.ptr(), N, c.d_model, c.q_up_dim(), wgrad);
  } else {
    // forward: q = cqn W_qu^T, cqn = rmsnorm(cq) * q_norm, cq = inp W_qd^T
    Tensor<T> dcqn({B, Tn, qr}), dcq({B, Tn, qr});
    cpu::linear_backward(dcqn.ptr(), grads.q_up.ptr(), (T*)nullptr, dqproj.ptr(), cache.cqn.ptr(),
                         p.q_up.ptr(), N, qr, c.q_up_dim(), wgrad);
    for (int r = 0; r < N; r++)
      mixer::rmsnorm_row_backward(dcq.ptr() + static_cast<std::size_t>(r) * qr, grads.q_norm.ptr(),
                                  dcqn.ptr() + static_cast<std::size_t>(r) * qr,
                                  cache.cq.ptr() + static_cast<std::size_t>(r) * qr, p.q_norm.ptr(),
                                  cache.q_rstd[r], qr);
    cpu::linear_backward(dinp.ptr(), grads.q_down.ptr(), (T*)nullptr, dcq.ptr(), inp.ptr(),
                         p.q_down.ptr(), N, c.d_model, qr, wgrad);
  }
  // forward: kv = ckvn W_kvu^T, ckvn = rmsnorm(ckv latent) * kv_norm, ckv = inp W_kvd^T
  Tensor<T> dckvn({B, Tn, kvr});
  cpu::linear_backward(dckvn.ptr(), grads.kv_up.ptr(), (T*)nullptr, dkvproj.ptr(), cache.ckvn.ptr(),
                       p.kv_up.ptr(), N, kvr, c.kv_up_dim(), wgrad);
  for (int r = 0; r < N; r++)
    mixer::rmsnorm_row_backward(dckv.ptr() + static_cast<std::size_t>(r) * KVD, grads.kv_norm.ptr(),
                                dckvn.ptr() + static_cast<std::size_t>(r) * kvr,
                                cache.ckv.ptr() + static_cast<std::size_t>(r) * KVD,
                                p.kv_norm.ptr(), cache.kv_rstd[r], kvr);
  cpu::linear_backward(dinp.ptr(), grads.kv_down.ptr(), (T*)nullptr, dckv.ptr(), inp.ptr(),
                       p.kv_down.ptr(), N, c.d_model, KVD, wgrad);
}

#define HT_MLA_INSTANTIATE(T)                                                                \
  template void mla_init<T>(MlaParams<T>&, const ModelConfig&, Rng&);                        \
  template void mla_forward<T>(const ModelConfig&, const MlaParams<T>&, const Tensor<T>&,    \
                               Tensor<T>&, MlaCache<T>&);                                    \
  template void mla_backward<T>(const ModelConfig&, const MlaParams<T>&, const MlaCache<T>&, \
                                const Tensor<T>&, const Tensor<T>&, Tensor<T>&, MlaParams<T>&, \
                                WgradSink<T>*);
HT_MLA_INSTANTIATE(float)
HT_MLA_INSTANTIATE(double)
#undef HT_MLA_INSTANTIATE

}  // namespace ht::engine
