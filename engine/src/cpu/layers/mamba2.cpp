// CPU reference Mamba2 mixer (see mamba2.hpp for the math, shapes and the gated-norm choice).
// Sequential scan per (sequence, head); backward runs the scan in reverse time with states
// recomputed by a forward sweep of the same code.
#include "ht/engine/layers/mamba2.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"
#include "mixer_common.hpp"

namespace ht::engine {

Mamba2Dims Mamba2Dims::from(const ModelConfig& cfg) {
  Mamba2Dims d;
  d.d_model = cfg.hidden;
  d.nheads = cfg.mamba_num_heads;
  d.headdim = cfg.mamba_head_dim;
  d.d_state = cfg.mamba_state_dim;
  d.ngroups = cfg.mamba_num_groups;
  d.d_conv = cfg.mamba_conv_kernel;
  mixer::require_positive(d.d_model, "hidden", "mamba2");
  mixer::require_positive(d.nheads, "mamba_num_heads", "mamba2");
  mixer::require_positive(d.headdim, "mamba_head_dim", "mamba2");
  mixer::require_positive(d.d_state, "mamba_state_dim", "mamba2");
  mixer::require_positive(d.ngroups, "mamba_num_groups", "mamba2");
  mixer::require_positive(d.d_conv, "mamba_conv_kernel", "mamba2");
  if (d.nheads % d.ngroups != 0)
    throw std::invalid_argument("mamba2: mamba_num_heads (" + std::to_string(d.nheads) +
                                ") must be a multiple of mamba_num_groups (" +
                                std::to_string(d.ngroups) + ")");
  return d;
}

std::size_t mamba2_param_count(const ModelConfig& cfg) {
  const Mamba2Dims c = Mamba2Dims::from(cfg);
  auto n = [](long a, long b) { return static_cast<std::size_t>(a * b); };
  return n(c.in_proj_dim(), c.d_model) + n(c.conv_dim(), c.d_conv + 1) + n(3, c.nheads) +
         n(c.d_inner(), 1) + n(c.d_model, c.d_inner());
}

template <class T>
void mamba2_init(Mamba2Params<T>& p, const ModelConfig& cfg, Rng& rng) {
  const Mamba2Dims c = Mamba2Dims::from(cfg);
  p.in_proj = Tensor<T>({c.in_proj_dim(), c.d_model});
  p.conv_weight = Tensor<T>({c.conv_dim(), c.d_conv});
  p.conv_bias = Tensor<T>({c.conv_dim()});
  p.dt_bias = Tensor<T>({c.nheads});
  p.A_log = Tensor<T>({c.nheads});
  p.D = Tensor<T>({c.nheads});
  p.norm = Tensor<T>({c.d_inner()});
  p.out_proj = Tensor<T>({c.d_model, c.d_inner()});
  mixer::fill_normal(p.in_proj, rng, cfg.init_std);
  const double cb = 1.0 / std::sqrt(static_cast<double>(c.d_conv));
  mixer::fill_uniform(p.conv_weight, rng, -cb, cb);
  mixer::fill_uniform(p.conv_bias, rng, -cb, cb);
  mixer::fill_dt_bias(p.dt_bias, rng);
  mixer::fill_a_log(p.A_log, rng);
  mixer::fill_constant(p.D, 1.0);
  mixer::fill_constant(p.norm, 1.0);
  mixer::fill_normal(p.out_proj, rng, cfg.init_std);
}

namespace {

// The scan of one (sequence, head h). xbc, dt, y point at the sequence's first row. states, when
// non-null, receives h_0..h_T ((T+1) * P*N values, h_0 = 0) for the backward pass.
template <class T>
void scan_head(const Mamba2Dims& c, const Mamba2Params<T>& p, const T* xbc, const T* dt, T* y,
               T* states, int Tn, int h) {
  const int P = c.headdim, N = c.d_state, Ch = c.conv_dim(), DI = c.d_inner();
  const int g = h / (c.nheads / c.ngroups);
  const T A = -std::exp(p.A_log[h]);
  const T Dh = p.D[h];
  std::vector<T> state(static_cast<std::size_t>(P) * N, T(0));
  if (states) std::fill(states, states + state.size(), T(0));
  for (int t = 0; t < Tn; t++) {
    const T* row = xbc + static_cast<std::size_t>(t) * Ch;
    const T* xt = row + h * P;
    const T* Bt = row + DI + g * N;
    const T* Ct = row + DI + c.ngroups * N + g * N;
    const T dtt = dt[static_cast<std::size_t>(t) * c.nheads + h];
    const T a = std::exp(dtt * A);
    T* yt = y + static_cast<std::size_t>(t) * DI + h * P;
    for (int i = 0; i < P; i++) {
      T acc = 0;
      for (int n = 0; n < N; n++) {
        T& s = state[static_cast<std::size_t>(i) * N + n];
        s = a * s + dtt * Bt[n] * xt[i];
        acc += s * Ct[n];
      }
      yt[i] = acc + Dh * xt[i];
    }
    if (states)
      std::copy(state.begin(), state.end(),
                states + static_cast<std::size_t>(t + 1) * state.size());
  }
}

}  // namespace

template <class T>
void mamba2_forward(const ModelConfig& cfg, const Mamba2Params<T>& p, const Tensor<T>& inp,
                    Tensor<T>& out, Mamba2Cache<T>& cache) {
  const Mamba2Dims c = Mamba2Dims::from(cfg);
  if (inp.rank() != 3 || inp.dim(2) != c.d_model)
    throw std::invalid_argument("mamba2_forward: inp must be (B, T, " + std::to_string(c.d_model) +
                                ")");
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn;
  const int DI = c.d_inner(), Ch = c.conv_dim(), IN = c.in_proj_dim(), H = c.nheads;
  const int G = c.ngroups, GS = DI / G;
  cache.zxbcdt = Tensor<T>({B, Tn, IN});
  cache.xbc_pre = Tensor<T>({B, Tn, Ch});
  cache.xbc = Tensor<T>({B, Tn, Ch});
  cache.dt = Tensor<T>({B, Tn, H});
  cache.y = Tensor<T>({B, Tn, DI});
  cache.rstd = Tensor<T>({B, Tn, G});
  cache.normed = Tensor<T>({B, Tn, DI});
  out = Tensor<T>({B, Tn, c.d_model});

  cpu::linear_forward(cache.zxbcdt.ptr(), inp.ptr(), p.in_proj.ptr(), (const T*)nullptr, N,
                      c.d_model, IN);
  mixer::causal_conv_forward(cache.xbc_pre.ptr(), cache.zxbcdt.ptr() + DI, IN, p.conv_weight.ptr(),
                             p.conv_bias.ptr(), B, Tn, Ch, c.d_conv);
  for (std::size_t i = 0; i < cache.xbc.size(); i++) cache.xbc[i] = math::silu(cache.xbc_pre[i]);
  for (int r = 0; r < N; r++)
    for (int h = 0; h < H; h++)
      cache.dt[static_cast<std::size_t>(r) * H + h] = math::softplus(
          cache.zxbcdt[static_cast<std::size_t>(r) * IN + DI + Ch + h] + p.dt_bias[h]);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      scan_head(c, p, cache.xbc.ptr() + static_cast<std::size_t>(b) * Tn * Ch,
                cache.dt.ptr() + static_cast<std::size_t>(b) * Tn * H,
                cache.y.ptr() + static_cast<std::size_t>(b) * Tn * DI, (T*)nullptr, Tn, h);
  const T eps = static_cast<T>(cfg.norm_eps);
  std::vector<T> gated(static_cast<std::size_t>(GS));
  for (int r = 0; r < N; r++)
    for (int g = 0; g < G; g++) {
      const std::size_t o = static_cast<std::size_t>(r) * DI + g * GS;
      const T* z = cache.zxbcdt.ptr() + static_cast<std::size_t>(r) * IN + g * GS;
      for (int i = 0; i < GS; i++) gated[i] = cache.y[o + i] * math::silu(z[i]);
      cache.rstd[static_cast<std::size_t>(r) * G + g] = mixer::rmsnorm_row_forward(
          cache.normed.ptr() + o, gated.data(), p.norm.ptr() + g * GS, GS, eps);
    }
  cpu::linear_forward(out.ptr(), cache.normed.ptr(), p.out_proj.ptr(), (const T*)nullptr, N, DI,
                      c.d_model);
}

template <class T>
void mamba2_backward(const ModelConfig& cfg, const Mamba2Params<T>& p, const Mamba2Cache<T>& cache,
                     const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                     Mamba2Params<T>& grads, WgradSink<T>* wgrad) {
  const Mamba2Dims c = Mamba2Dims::from(cfg);
  const int B = inp.dim(0), Tn = inp.dim(1), N = B * Tn;
  const int DI = c.d_inner(), Ch = c.conv_dim(), IN = c.in_proj_dim(), H = c.nheads;
  const int G = c.ngroups, GS = DI / G, P = c.headdim, NS = c.d_state;
  Tensor<T> dnormed({B, Tn, DI});
  Tensor<T> dzxbcdt({B, Tn, IN});
  Tensor<T> dy({B, Tn, DI});
  Tensor<T> dxbc({B, Tn, Ch});
  Tensor<T> ddt({B, Tn, H});

  // forward: out = normed W_out^T
  cpu::linear_backward(dnormed.ptr(), grads.out_proj.ptr(), (T*)nullptr, dout.ptr(),
                       cache.normed.ptr(), p.out_proj.ptr(), N, DI, c.d_model, wgrad);

  // forward: normed = rmsnorm_per_group(gated) * norm, gated = y * silu(z)
  std::vector<T> gated(static_cast<std::size_t>(GS)), dgated(static_cast<std::size_t>(GS));
  for (int r = 0; r < N; r++)
    for (int g = 0; g < G; g++) {
      const std::size_t o = static_cast<std::size_t>(r) * DI + g * GS;
      const std::size_t zo = static_cast<std::size_t>(r) * IN + g * GS;
      for (int i = 0; i < GS; i++) gated[i] = cache.y[o + i] * math::silu(cache.zxbcdt[zo + i]);
      std::fill(dgated.begin(), dgated.end(), T(0));
      mixer::rmsnorm_row_backward(dgated.data(), grads.norm.ptr() + g * GS, dnormed.ptr() + o,
                                  gated.data(), p.norm.ptr() + g * GS,
                                  cache.rstd[static_cast<std::size_t>(r) * G + g], GS);
      for (int i = 0; i < GS; i++) {
        const T z = cache.zxbcdt[zo + i];
        dy[o + i] += dgated[i] * math::silu(z);
        dzxbcdt[zo + i] += dgated[i] * cache.y[o + i] * math::silu_grad(z);
      }
    }

  // The scan in reverse time, per (sequence, head); dstate carries dL/dh_t backwards.
  const std::size_t SS = static_cast<std::size_t>(P) * NS;
  std::vector<T> states, dstate(SS);
  Tensor<T> yscratch({Tn, DI});
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const std::size_t xo = static_cast<std::size_t>(b) * Tn * Ch;
      const std::size_t dto = static_cast<std::size_t>(b) * Tn * H;
      states.assign(static_cast<std::size_t>(Tn + 1) * SS, T(0));
      scan_head(c, p, cache.xbc.ptr() + xo, cache.dt.ptr() + dto, yscratch.ptr(), states.data(), Tn,
                h);
      const int g = h / (H / G);
      const T A = -std::exp(p.A_log[h]);
      T dA = 0;
      std::fill(dstate.begin(), dstate.end(), T(0));
      for (int t = Tn - 1; t >= 0; t--) {
        const T* row = cache.xbc.ptr() + xo + static_cast<std::size_t>(t) * Ch;
        T* drow = dxbc.ptr() + xo + static_cast<std::size_t>(t) * Ch;
        const T* xt = row + h * P;
        const T* Bt = row + DI + g * NS;
        const T* Ct = row + DI + G * NS + g * NS;
        T* dxt = drow + h * P;
        T* dBt = drow + DI + g * NS;
        T* dCt = drow + DI + G * NS + g * NS;
        const T dtt = cache.dt[dto + static_cast<std::size_t>(t) * H + h];
        const T a = std::exp(dtt * A);
        const T* hcur = states.data() + static_cast<std::size_t>(t + 1) * SS;
        const T* hprev = states.data() + static_cast<std::size_t>(t) * SS;
        const T* dyt = dy.ptr() + (static_cast<std::size_t>(b) * Tn + t) * DI + h * P;
        // forward: y_t = h_t C_t + D x_t
        for (int i = 0; i < P; i++) {
          grads.D[h] += dyt[i] * xt[i];
          dxt[i] += p.D[h] * dyt[i];
          for (int n = 0; n < NS; n++) {
            dstate[static_cast<std::size_t>(i) * NS + n] += dyt[i] * Ct[n];
            dCt[n] += dyt[i] * hcur[static_cast<std::size_t>(i) * NS + n];
          }
        }
        // forward: h_t = a h_{t-1} + dt_t x_t B_t^T
        T da = 0, ddtt = 0;
        for (int i = 0; i < P; i++)
          for (int n = 0; n < NS; n++) {
            const std::size_t k = static_cast<std::size_t>(i) * NS + n;
            const T ds = dstate[k];
            da += ds * hprev[k];
            ddtt += ds * Bt[n] * xt[i];
            dBt[n] += ds * dtt * xt[i];
            dxt[i] += ds * dtt * Bt[n];
            dstate[k] = a * ds;  // now dL/dh_{t-1} from this step
          }
        // forward: a = exp(dt_t A)
        ddtt += da * a * A;
        dA += da * a * dtt;
        ddt[dto + static_cast<std::size_t>(t) * H + h] += ddtt;
      }
      // forward: A = -exp(A_log), so dA/dA_log = A
      grads.A_log[h] += dA * A;
    }

  // forward: dt = softplus(dt_raw + dt_bias)
  for (int r = 0; r < N; r++)
    for (int h = 0; h < H; h++) {
      const std::size_t zo = static_cast<std::size_t>(r) * IN + DI + Ch + h;
      const T d = ddt[static_cast<std::size_t>(r) * H + h] *
                  math::softplus_grad(cache.zxbcdt[zo] + p.dt_bias[h]);
      dzxbcdt[zo] += d;
      grads.dt_bias[h] += d;
    }
  // forward: xbc = silu(xbc_pre)
  Tensor<T> dxbc_pre({B, Tn, Ch});
  for (std::size_t i = 0; i < dxbc.size(); i++)
    dxbc_pre[i] = dxbc[i] * math::silu_grad(cache.xbc_pre[i]);
  // forward: xbc_pre = causal_conv(zxbcdt[xBC]) + conv_bias
  mixer::causal_conv_backward(dzxbcdt.ptr() + DI, grads.conv_weight.ptr(), grads.conv_bias.ptr(),
                              dxbc_pre.ptr(), cache.zxbcdt.ptr() + DI, IN, p.conv_weight.ptr(), B,
                              Tn, Ch, c.d_conv);
  // forward: zxbcdt = inp W_in^T
  cpu::linear_backward(dinp.ptr(), grads.in_proj.ptr(), (T*)nullptr, dzxbcdt.ptr(), inp.ptr(),
                       p.in_proj.ptr(), N, c.d_model, IN, wgrad);
}

#define HT_MAMBA2_INSTANTIATE(T)                                                                \
  template void mamba2_init<T>(Mamba2Params<T>&, const ModelConfig&, Rng&);                     \
  template void mamba2_forward<T>(const ModelConfig&, const Mamba2Params<T>&, const Tensor<T>&, \
                                  Tensor<T>&, Mamba2Cache<T>&);                                 \
  template void mamba2_backward<T>(const ModelConfig&, const Mamba2Params<T>&,                  \
                                   const Mamba2Cache<T>&, const Tensor<T>&, const Tensor<T>&,   \
                                   Tensor<T>&, Mamba2Params<T>&, WgradSink<T>*);
HT_MAMBA2_INSTANTIATE(float)
HT_MAMBA2_INSTANTIATE(double)
#undef HT_MAMBA2_INSTANTIATE

}  // namespace ht::engine
