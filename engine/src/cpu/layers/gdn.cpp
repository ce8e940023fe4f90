// CPU reference Gated DeltaNet mixer (see gdn.hpp for the math, shapes and stated choices).
// The delta rule runs sequentially per (sequence, value head); backward walks it in reverse time
// with states recomputed by a forward sweep of the same code.
#include "ht/engine/layers/gdn.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"
#include "mixer_common.hpp"

namespace ht::engine {

GdnDims GdnDims::from(const ModelConfig& cfg) {
  GdnDims d;
  d.d_model = cfg.hidden;
  d.num_k_heads = cfg.gdn_num_heads;
  d.num_v_heads = cfg.gdn_num_v_heads;
  d.head_k_dim = cfg.gdn_head_dim_qk;
  d.head_v_dim = cfg.gdn_head_dim_v;
  d.d_conv = cfg.gdn_conv_kernel;
  mixer::require_positive(d.d_model, "hidden", "gdn");
  mixer::require_positive(d.num_k_heads, "gdn_num_heads", "gdn");
  mixer::require_positive(d.num_v_heads, "gdn_num_v_heads", "gdn");
  mixer::require_positive(d.head_k_dim, "gdn_head_dim_qk", "gdn");
  mixer::require_positive(d.head_v_dim, "gdn_head_dim_v", "gdn");
  mixer::require_positive(d.d_conv, "gdn_conv_kernel", "gdn");
  if (d.num_v_heads % d.num_k_heads != 0)
    throw std::invalid_argument("gdn: gdn_num_v_heads (" + std::to_string(d.num_v_heads) +
                                ") must be a multiple of gdn_num_heads (" +
                                std::to_string(d.num_k_heads) + ")");
  return d;
}

std::size_t gdn_param_count(const ModelConfig& cfg) {
  const GdnDims c = GdnDims::from(cfg);
  auto n = [](long a, long b) { return static_cast<std::size_t>(a * b); };
  return n(c.in_proj_dim(), c.d_model) + n(c.conv_dim(), c.d_conv) + n(2, c.num_v_heads) +
         n(c.head_v_dim, 1) + n(c.d_model, c.value_dim());
}

template <class T>
void gdn_init(GdnParams<T>& p, const ModelConfig& cfg, Rng& rng) {
  const GdnDims c = GdnDims::from(cfg);
  p.in_proj = Tensor<T>({c.in_proj_dim(), c.d_model});
  p.conv_weight = Tensor<T>({c.conv_dim(), c.d_conv});
  p.dt_bias = Tensor<T>({c.num_v_heads});
  p.A_log = Tensor<T>({c.num_v_heads});
  p.out_norm = Tensor<T>({c.head_v_dim});
  p.out_proj = Tensor<T>({c.d_model, c.value_dim()});
  mixer::fill_normal(p.in_proj, rng, cfg.init_std);
  const double cb = 1.0 / std::sqrt(static_cast<double>(c.d_conv));
  mixer::fill_uniform(p.conv_weight, rng, -cb, cb);
  mixer::fill_dt_bias(p.dt_bias, rng);
  mixer::fill_a_log(p.A_log, rng);
  mixer::fill_constant(p.out_norm, 1.0);
  mixer::fill_normal(p.out_proj, rng, cfg.init_std);
}

namespace {
// One (batch row, value head) of the gated delta rule. Pointers are already offset to the batch
// row. states, when non-null, receives S_0..S_T ((T+1) * dv*dk, S_0 = 0).
template <class T>
void delta_rule_head(const GdnDims& c, const T* qn, const T* kn, const T* qkv, const T* beta,
                     const T* g, T* o, T* states, int Tn, int hv) {
  const int dk = c.head_k_dim, dv = c.head_v_dim, Hv = c.num_v_heads, KD = c.key_dim();
  const int hk = hv / (Hv / c.num_k_heads);
  const T scale = T(1) / std::sqrt(static_cast<T>(dk));
  // The state is kept transposed here, St (dk, dv): for a fixed key channel j the dv entries are
  // contiguous, so every update is one vector operation over i, and every sum over j still runs
  // in j order for each i: the same operations in the same order as S (dv, dk) row by row.
  using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
  using VMap = Eigen::Map<Vec>;
  using CVMap = Eigen::Map<const Vec>;
  const std::size_t SS = static_cast<std::size_t>(dv) * dk;
  Vec St = Vec::Zero(static_cast<Eigen::Index>(SS)), u(dv), acc(dv);
  if (states) std::fill(states, states + SS, T(0));
  for (int t = 0; t < Tn; t++) {
    const T* q = qn + static_cast<std::size_t>(t) * KD + hk * dk;
    const T* k = kn + static_cast<std::size_t>(t) * KD + hk * dk;
    const CVMap v(qkv + static_cast<std::size_t>(t) * c.conv_dim() + 2 * KD + hv * dv, dv);
    const T b = beta[static_cast<std::size_t>(t) * Hv + hv];
    const T decay = std::exp(g[static_cast<std::size_t>(t) * Hv + hv]);
    // S <- decay S; u = S k; S <- S + beta (v - u) k^T; o = S q scale
    u.setZero();
    for (int j = 0; j < dk; j++) {
      VMap s(St.data() + static_cast<std::size_t>(j) * dv, dv);
      s *= decay;
      u += s * k[j];
    }
    const Vec w = b * (v - u);
    acc.setZero();
    for (int j = 0; j < dk; j++) {
      VMap s(St.data() + static_cast<std::size_t>(j) * dv, dv);
      s += w * k[j];
      acc += s * q[j];
    }
    VMap(o + static_cast<std::size_t>(t) * c.value_dim() + hv * dv, dv) = acc * scale;
    if (states) {  // saved as S (dv, dk) for the backward pass
      T* dst = states + static_cast<std::size_t>(t + 1) * SS;
      for (int i = 0; i < dv; i++)
        for (int j = 0; j < dk; j++)
          dst[static_cast<std::size_t>(i) * dk + j] = St[static_cast<Eigen::Index>(j) * dv + i];
    }
  }
}
}  // namespace

template <class T>
void gdn_forward(const ModelConfig& cfg, const GdnParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, GdnCache<T>& cache) {
  const GdnDims c = GdnDims::from(cfg);
  if (inp.rank() != 3 || inp.dim(2) != c.d_model)
    throw std::invalid_argument("gdn_forward: inp must be (B, T, " + std::to_string(c.d_model) +
                                ")");
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn;
  const int IN = c.in_proj_dim(), Ch = c.conv_dim(), KD = c.key_dim(), VD = c.value_dim();
  const int Hk = c.num_k_heads, Hv = c.num_v_heads, dk = c.head_k_dim, dv = c.head_v_dim;
  cache.proj = Tensor<T>({B, Tn, IN});
  cache.qkv_pre = Tensor<T>({B, Tn, Ch});
  cache.qkv = Tensor<T>({B, Tn, Ch});
  cache.qn = Tensor<T>({B, Tn, KD});
  cache.kn = Tensor<T>({B, Tn, KD});
  cache.q_rnorm = Tensor<T>({B, Tn, Hk});
  cache.k_rnorm = Tensor<T>({B, Tn, Hk});
  cache.beta = Tensor<T>({B, Tn, Hv});
  cache.g = Tensor<T>({B, Tn, Hv});
  cache.o = Tensor<T>({B, Tn, VD});
  cache.rstd = Tensor<T>({B, Tn, Hv});
  cache.gated = Tensor<T>({B, Tn, VD});
  out = Tensor<T>({B, Tn, c.d_model});

  cpu::linear_forward(cache.proj.ptr(), inp.ptr(), p.in_proj.ptr(), (const T*)nullptr, N, c.d_model,
                      IN);
  mixer::causal_conv_forward(cache.qkv_pre.ptr(), cache.proj.ptr(), IN, p.conv_weight.ptr(),
                             (const T*)nullptr, B, Tn, Ch, c.d_conv);
  for (std::size_t i = 0; i < cache.qkv.size(); i++) cache.qkv[i] = math::silu(cache.qkv_pre[i]);
  const T l2eps = static_cast<T>(GdnDims::l2_eps);
  for (int r = 0; r < N; r++) {
    const T* row = cache.qkv.ptr() + static_cast<std::size_t>(r) * Ch;
    for (int h = 0; h < Hk; h++)
      for (int which = 0; which < 2; which++) {
        const T* src = row + which * KD + h * dk;
        T* dst =
            (which == 0 ? cache.qn : cache.kn).ptr() + static_cast<std::size_t>(r) * KD + h * dk;
        T ss = 0;
        for (int j = 0; j < dk; j++) ss += src[j] * src[j];
        T rn = T(1) / std::sqrt(ss + l2eps);
        for (int j = 0; j < dk; j++) dst[j] = src[j] * rn;
        (which == 0 ? cache.q_rnorm : cache.k_rnorm)[static_cast<std::size_t>(r) * Hk + h] = rn;
      }
    const T* pr = cache.proj.ptr() + static_cast<std::size_t>(r) * IN;
    for (int h = 0; h < Hv; h++) {
      const std::size_t i = static_cast<std::size_t>(r) * Hv + h;
      cache.beta[i] = math::sigmoid(pr[2 * KD + 2 * VD + h]);
      cache.g[i] =
          -std::exp(p.A_log[h]) * math::softplus(pr[2 * KD + 2 * VD + Hv + h] + p.dt_bias[h]);
    }
  }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hv; h++) {
      const std::size_t r0 = static_cast<std::size_t>(b) * Tn;
      delta_rule_head(c, cache.qn.ptr() + r0 * KD, cache.kn.ptr() + r0 * KD,
                      cache.qkv.ptr() + r0 * Ch, cache.beta.ptr() + r0 * Hv,
                      cache.g.ptr() + r0 * Hv, cache.o.ptr() + r0 * VD, (T*)nullptr, Tn, h);
    }
  const T eps = static_cast<T>(cfg.norm_eps);
  for (int r = 0; r < N; r++)
    for (int h = 0; h < Hv; h++) {
      const std::size_t o = static_cast<std::size_t>(r) * VD + h * dv;
      const T* z = cache.proj.ptr() + static_cast<std::size_t>(r) * IN + 2 * KD + VD + h * dv;
      T* gt = cache.gated.ptr() + o;
      cache.rstd[static_cast<std::size_t>(r) * Hv + h] =
          mixer::rmsnorm_row_forward(gt, cache.o.ptr() + o, p.out_norm.ptr(), dv, eps);
      for (int i = 0; i < dv; i++) gt[i] *= math::silu(z[i]);
    }
  cpu::linear_forward(out.ptr(), cache.gated.ptr(), p.out_proj.ptr(), (const T*)nullptr, N, VD,
                      c.d_model);
}

template <class T>
void gdn_backward(const ModelConfig& cfg, const GdnParams<T>& p, const GdnCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  GdnParams<T>& grads, WgradSink<T>* wgrad) {
  const GdnDims c = GdnDims::from(cfg);
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn;
  const int IN = c.in_proj_dim(), Ch = c.conv_dim(), KD = c.key_dim(), VD = c.value_dim();
  const int Hk = c.num_k_heads, Hv = c.num_v_heads, dk = c.head_k_dim, dv = c.head_v_dim;
  Tensor<T> dgated({B, Tn, VD});
  Tensor<T> dproj({B, Tn, IN});
  Tensor<T> dqkv({B, Tn, Ch});  // grads of the post-SiLU conv output; q, k parts filled below
  Tensor<T> dqn({B, Tn, KD}), dkn({B, Tn, KD});
  Tensor<T> do_({B, Tn, VD});
  Tensor<T> dbeta({B, Tn, Hv}), dg({B, Tn, Hv});

  // forward: out = gated W_out^T
  cpu::linear_backward(dgated.ptr(), grads.out_proj.ptr(), (T*)nullptr, dout.ptr(),
                       cache.gated.ptr(), p.out_proj.ptr(), N, VD, c.d_model, wgrad);
  // forward: gated = rmsnorm(o) * norm_weight * silu(z)
  std::vector<T> normed(static_cast<std::size_t>(dv)), dnormed(static_cast<std::size_t>(dv));
  for (int r = 0; r < N; r++)
    for (int h = 0; h < Hv; h++) {
      const std::size_t o = static_cast<std::size_t>(r) * VD + h * dv;
      const std::size_t zo = static_cast<std::size_t>(r) * IN + 2 * KD + VD + h * dv;
      const T rstd = cache.rstd[static_cast<std::size_t>(r) * Hv + h];
      for (int i = 0; i < dv; i++) {
        normed[i] = cache.o[o + i] * rstd * p.out_norm[i];
        T z = cache.proj[zo + i];
        dnormed[i] = dgated[o + i] * math::silu(z);
        dproj[zo + i] += dgated[o + i] * normed[i] * math::silu_grad(z);
      }
      mixer::rmsnorm_row_backward(do_.ptr() + o, grads.out_norm.ptr(), dnormed.data(),
                                  cache.o.ptr() + o, p.out_norm.ptr(), rstd, dv);
    }

  // The recurrence, reverse time, per (b, value head); states recomputed.
  const T scale = T(1) / std::sqrt(static_cast<T>(dk));
  const std::size_t SS = static_cast<std::size_t>(dv) * dk;
  std::vector<T> states, dS(SS), Sd(SS), u(static_cast<std::size_t>(dv)),
      w(static_cast<std::size_t>(dv)), dSk(static_cast<std::size_t>(dv)),
      du(static_cast<std::size_t>(dv));
  Tensor<T> oscratch({Tn, VD});
  for (int b = 0; b < B; b++)
    for (int hv = 0; hv < Hv; hv++) {
      const int hk = hv / (Hv / Hk);
      const std::size_t r0 = static_cast<std::size_t>(b) * Tn;
      states.assign(static_cast<std::size_t>(Tn + 1) * SS, T(0));
      delta_rule_head(c, cache.qn.ptr() + r0 * KD, cache.kn.ptr() + r0 * KD,
                      cache.qkv.ptr() + r0 * Ch, cache.beta.ptr() + r0 * Hv,
                      cache.g.ptr() + r0 * Hv, oscratch.ptr(), states.data(), Tn, hv);
      std::fill(dS.begin(), dS.end(), T(0));
      for (int t = Tn - 1; t >= 0; t--) {
        const std::size_t r = r0 + t;
        const T* q = cache.qn.ptr() + r * KD + hk * dk;
        const T* k = cache.kn.ptr() + r * KD + hk * dk;
        const T* v = cache.qkv.ptr() + r * Ch + 2 * KD + hv * dv;
        T* dq = dqn.ptr() + r * KD + hk * dk;
        T* dk_ = dkn.ptr() + r * KD + hk * dk;
        T* dvv = dqkv.ptr() + r * Ch + 2 * KD + hv * dv;
        const T* dot = do_.ptr() + r * VD + hv * dv;
        const T bt = cache.beta[r * Hv + hv];
        const T decay = std::exp(cache.g[r * Hv + hv]);
        const T* Sprev = states.data() + static_cast<std::size_t>(t) * SS;
        const T* Scur = states.data() + static_cast<std::size_t>(t + 1) * SS;
        // Row i of S (dv, dk) is a vector over j: each loop below is one vector operation per
        // row, and every sum over i still runs in i order for each j (the scalar form's order).
        using Row = Eigen::Array<T, Eigen::Dynamic, 1>;
        using RMap = Eigen::Map<Row>;
        using CRMap = Eigen::Map<const Row>;
        const CRMap qv(q, dk), kv(k, dk);
        // forward: o_t = S_t q scale
        RMap dqv(dq, dk);
        for (int i = 0; i < dv; i++) {
          RMap(dS.data() + i * dk, dk) += dot[i] * qv * scale;
          dqv += CRMap(Scur + i * dk, dk) * dot[i] * scale;
        }
        // forward: Sd = decay S_{t-1}; u = Sd k; S_t = Sd + beta (v - u) k^T
        for (int i = 0; i < dv; i++) {
          T acc = 0, acc2 = 0;
          for (int j = 0; j < dk; j++) {
            Sd[i * dk + j] = decay * Sprev[i * dk + j];
            acc += Sd[i * dk + j] * k[j];
            acc2 += dS[i * dk + j] * k[j];
          }
          u[i] = acc;
          w[i] = v[i] - acc;
          dSk[i] = acc2;
        }
        T dbt = 0;
        for (int i = 0; i < dv; i++) {
          dbt += w[i] * dSk[i];
          dvv[i] += bt * dSk[i];
          du[i] = -bt * dSk[i];
        }
        Row acc = Row::Zero(dk);
        for (int i = 0; i < dv; i++)
          acc += CRMap(dS.data() + i * dk, dk) * w[i] * bt + CRMap(Sd.data() + i * dk, dk) * du[i];
        RMap(dk_, dk) += acc;
        // dSd = dS + du k^T; dg = <dSd, Sd> (one scalar sum in row-major order); dS_{t-1} = decay dSd
        T dgt = 0;
        Row d(dk);
        for (int i = 0; i < dv; i++) {
          RMap dSi(dS.data() + i * dk, dk);
          d = dSi + du[i] * kv;
          const T* sdi = Sd.data() + i * dk;
          for (int j = 0; j < dk; j++) dgt += d[j] * sdi[j];
          dSi = decay * d;
        }
        dbeta[r * Hv + hv] += dbt;
        dg[r * Hv + hv] += dgt;
      }
    }

  for (int r = 0; r < N; r++) {
    T* dpr = dproj.ptr() + static_cast<std::size_t>(r) * IN;
    const T* pr = cache.proj.ptr() + static_cast<std::size_t>(r) * IN;
    for (int h = 0; h < Hv; h++) {
      const std::size_t i = static_cast<std::size_t>(r) * Hv + h;
      // forward: beta = sigmoid(beta_raw)
      const T bt = cache.beta[i];
      dpr[2 * KD + 2 * VD + h] += dbeta[i] * bt * (T(1) - bt);
      // forward: g = -exp(A_log) * softplus(alpha + dt_bias)
      const T a = pr[2 * KD + 2 * VD + Hv + h] + p.dt_bias[h];
      const T dsp = dg[i] * -std::exp(p.A_log[h]) * math::softplus_grad(a);
      dpr[2 * KD + 2 * VD + Hv + h] += dsp;
      grads.dt_bias[h] += dsp;
      grads.A_log[h] += dg[i] * cache.g[i];
    }
    // forward: qn = q / sqrt(sum q^2 + eps) (and kn)
    for (int h = 0; h < Hk; h++)
      for (int which = 0; which < 2; which++) {
        const std::size_t o = static_cast<std::size_t>(r) * KD + h * dk;
        const T* xn = (which == 0 ? cache.qn : cache.kn).ptr() + o;
        const T* dxn = (which == 0 ? dqn : dkn).ptr() + o;
        const T rn =
            (which == 0 ? cache.q_rnorm : cache.k_rnorm)[static_cast<std::size_t>(r) * Hk + h];
        T dot = 0;
        for (int j = 0; j < dk; j++) dot += xn[j] * dxn[j];
        T* dst = dqkv.ptr() + static_cast<std::size_t>(r) * Ch + which * KD + h * dk;
        for (int j = 0; j < dk; j++) dst[j] += rn * (dxn[j] - xn[j] * dot);
      }
  }
  // forward: qkv = silu(qkv_pre)
  Tensor<T> dqkv_pre({B, Tn, Ch});
  for (std::size_t i = 0; i < dqkv.size(); i++)
    dqkv_pre[i] = dqkv[i] * math::silu_grad(cache.qkv_pre[i]);
  // forward: qkv_pre = causal_conv(proj[q|k|v])
  mixer::causal_conv_backward(dproj.ptr(), grads.conv_weight.ptr(), (T*)nullptr, dqkv_pre.ptr(),
                              cache.proj.ptr(), IN, p.conv_weight.ptr(), B, Tn, Ch, c.d_conv);
  // forward: proj = x W_in^T
  cpu::linear_backward(dinp.ptr(), grads.in_proj.ptr(), (T*)nullptr, dproj.ptr(), inp.ptr(),
                       p.in_proj.ptr(), N, c.d_model, IN, wgrad);
}

#define HT_GDN_INSTANTIATE(T)                                                                \
  template void gdn_init<T>(GdnParams<T>&, const ModelConfig&, Rng&);                        \
  template void gdn_forward<T>(const ModelConfig&, const GdnParams<T>&, const Tensor<T>&,    \
                               Tensor<T>&, GdnCache<T>&);                                    \
  template void gdn_backward<T>(const ModelConfig&, const GdnParams<T>&, const GdnCache<T>&, \
                                const Tensor<T>&, const Tensor<T>&, Tensor<T>&, GdnParams<T>&, \
                                WgradSink<T>*);
HT_GDN_INSTANTIATE(float)
HT_GDN_INSTANTIATE(double)
#undef HT_GDN_INSTANTIATE

}  // namespace ht::engine
