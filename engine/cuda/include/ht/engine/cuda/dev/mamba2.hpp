// CUDA layers: the Mamba2 mixer of 'M' over a device policy D (dev/host.hpp); math, shapes and
// every accumulation order as layers/mamba2.hpp. The state h (P, N) of one (sequence, head) splits
// into P independent rows: one thread per (batch, head, channel i) runs row i's scan over time
// (its N state values in global scratch). Sums the CPU runs across channels or heads (da, ddt,
// dB, dC) and across tokens (every weight gradient) are separate launches with one thread per
// output value, adding the terms in the CPU's loop order, so the host emulation matches it bit for bit.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "ht/engine/config.hpp"
#include "ht/engine/cuda/dev/conv.hpp"
#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/wgrad.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

struct Mamba2DimsD {
  int b, t, c;  // batch, sequence, d_model
  int h, p, n, g, k;  // heads, head dim, state size, B/C groups, conv taps
  HT_HD int di() const { return h * p; }
  HT_HD int ch() const { return di() + 2 * g * n; }  // conv channels: x | B | C
  HT_HD int in() const { return 2 * di() + 2 * g * n + h; }  // z | xBC | dt
  HT_HD int gs() const { return di() / g; }  // gated-norm group width
  HT_HD int hpg() const { return h / g; }
  HT_HD long rows() const { return static_cast<long>(b) * t; }
};

// The CPU's own validation (Mamba2Dims::from), then the input width.
inline Mamba2DimsD mamba2_dims(const ModelConfig& cfg, int b, int t, int c) {
  const Mamba2Dims m = Mamba2Dims::from(cfg);
  if (c != m.d_model)
    throw std::invalid_argument("mamba2: input width " + std::to_string(c) + " != hidden " +
                                std::to_string(m.d_model));
  if (b <= 0 || t <= 0) throw std::invalid_argument("mamba2: batch and sequence must be positive");
  return Mamba2DimsD{b, t, c, m.nheads, m.headdim, m.d_state, m.ngroups, m.d_conv};
}

template <class T>
struct Mamba2W {
  const T* in_proj = nullptr;      // (in, C)
  const T* conv_weight = nullptr;  // (ch, K)
  const T* conv_bias = nullptr;    // (ch)
  const T* dt_bias = nullptr;      // (H)
  const T* A_log = nullptr;        // (H)
  const T* D = nullptr;            // (H)
  const T* norm = nullptr;         // (di)
  const T* out_proj = nullptr;     // (C, di)
};
template <class T>
struct Mamba2Grad {
  T* in_proj = nullptr;
  T* conv_weight = nullptr;
  T* conv_bias = nullptr;
  T* dt_bias = nullptr;
  T* A_log = nullptr;
  T* D = nullptr;
  T* norm = nullptr;
  T* out_proj = nullptr;
};

template <class D, class T>
struct Mamba2CacheD {
  Buf<D, T> zxbcdt;   // (B, T, in)
  Buf<D, T> xbc_pre;  // (B, T, ch) conv output before SiLU
  Buf<D, T> xbc;      // (B, T, ch)
  Buf<D, T> dt;       // (B, T, H) after softplus
  Buf<D, T> y;        // (B, T, di) scan output
  Buf<D, T> rstd;     // (B, T, G)
  Buf<D, T> normed;   // (B, T, di) out_proj input
};

// Row i of head hh's state over one sequence: s_t = a_t s_{t-1} + dt_t x_t,i B_t, y_t,i = s_t . C_t
// + D x_t,i. xbc, dt, y point at the sequence's first row; s holds N values of scratch; hist, when
// non-null, receives s_0..s_T ((T+1) N values); y may be null (the backward's recompute).
template <class T>
HT_HD inline void mamba2_scan_row(const Mamba2DimsD& dm, const T* xbc, const T* dt, T* y, T* s, T* hist, T A,
                                  T dskip, int hh, int i) {
  const int grp = hh / dm.hpg(), ch = dm.ch(), di = dm.di(), ns = dm.n;
  for (int j = 0; j < ns; ++j) s[j] = T(0);
  if (hist)
    for (int j = 0; j < ns; ++j) hist[j] = T(0);
  for (int t = 0; t < dm.t; ++t) {
    const T* row = xbc + static_cast<long>(t) * ch;
    const T xt = row[hh * dm.p + i];
    const T* bt = row + di + grp * ns;
    const T* ct = row + di + dm.g * ns + grp * ns;
    const T dtt = dt[static_cast<long>(t) * dm.h + hh];
    const T a = std::exp(dtt * A);
    T acc = T(0);
    for (int j = 0; j < ns; ++j) {
      s[j] = a * s[j] + dtt * bt[j] * xt;
      acc += s[j] * ct[j];
    }
    if (y) y[static_cast<long>(t) * di + hh * dm.p + i] = acc + dskip * xt;
    if (hist)
      for (int j = 0; j < ns; ++j) hist[static_cast<long>(t + 1) * ns + j] = s[j];
  }
}

// inp, out (B, T, C); out is overwritten, the cache refilled.
template <class D, class T>
void mamba2_forward(const ModelConfig& cfg, const Mamba2W<T>& w, const T* inp, T* out, int b, int t, int c,
                    Mamba2CacheD<D, T>& cache) {
  const Mamba2DimsD dm = mamba2_dims(cfg, b, t, c);
  const long nr = dm.rows();
  const int in = dm.in(), ch = dm.ch(), di = dm.di(), nh = dm.h;
  cache.zxbcdt.resize(static_cast<std::size_t>(nr) * in);
  cache.xbc_pre.resize(static_cast<std::size_t>(nr) * ch);
  cache.xbc.resize(static_cast<std::size_t>(nr) * ch);
  cache.dt.resize(static_cast<std::size_t>(nr) * nh);
  cache.y.resize(static_cast<std::size_t>(nr) * di);
  cache.rstd.resize(static_cast<std::size_t>(nr) * dm.g);
  cache.normed.resize(static_cast<std::size_t>(nr) * di);
  T *zx = cache.zxbcdt.get(), *pre = cache.xbc_pre.get(), *xbc = cache.xbc.get(), *dt = cache.dt.get();
  T *y = cache.y.get(), *rstd = cache.rstd.get(), *normed = cache.normed.get();

  D::gemm(zx, inp, w.in_proj, static_cast<int>(nr), in, c, false, true, false);
  causal_conv_silu_forward<D, T>(pre, xbc, zx + di, in, w.conv_weight, w.conv_bias, nr, dm.t, ch, dm.k);
  const T* dtb = w.dt_bias;
  D::launch(nr * nh, [=] HT_HD(long i) {
    const long r = i / nh;
    const int hh = static_cast<int>(i % nh);
    dt[i] = math::softplus(zx[r * in + di + ch + hh] + dtb[hh]);
  });
  Buf<D, T> state_buf(static_cast<std::size_t>(nr / dm.t) * nh * dm.p * dm.n);
  T* state = state_buf.get();
  const T* alog = w.A_log;
  const T* dsk = w.D;
  D::launch(static_cast<long>(dm.b) * nh * dm.p, [=] HT_HD(long i) {
    const int ii = static_cast<int>(i % dm.p);
    const int hh = static_cast<int>((i / dm.p) % dm.h);
    const long bb = i / (static_cast<long>(dm.p) * dm.h);
    const long r0 = bb * dm.t;
    mamba2_scan_row(dm, xbc + r0 * ch, dt + r0 * dm.h, y + r0 * di, state + i * dm.n, static_cast<T*>(nullptr),
                    -std::exp(alog[hh]), dsk[hh], hh, ii);
  });
  // Gate then norm (norm_before_gate = False), one thread per (token, group); the gated product
  // is staged in `normed` and normalised in place (each value is read before it is overwritten).
  const T eps = static_cast<T>(cfg.norm_eps);
  const T* nw = w.norm;
  D::launch(nr * dm.g, [=] HT_HD(long i) {
    const long r = i / dm.g;
    const int gg = static_cast<int>(i % dm.g);
    const int gs = dm.gs();
    const long o = r * di + static_cast<long>(gg) * gs;
    const T* z = zx + r * in + static_cast<long>(gg) * gs;
    T* dst = normed + o;
    for (int j = 0; j < gs; ++j) dst[j] = y[o + j] * math::silu(z[j]);
    const T rs = math::rms_rstd(dst, gs, eps);
    rstd[i] = rs;
    for (int j = 0; j < gs; ++j) dst[j] = dst[j] * rs * nw[gg * gs + j];
  });
  D::gemm(out, normed, w.out_proj, static_cast<int>(nr), c, di, false, true, false);
}

// dinp and the weight gradients accumulate. The backward recomputes the scan states of every
// (sequence, head, row) at once and keeps them, with dL/ds, in global scratch: B H P (2T+1) N
// values (the CPU keeps one (sequence, head)'s at a time).
template <class D, class T>
void mamba2_backward(const ModelConfig& cfg, const Mamba2W<T>& w, const Mamba2CacheD<D, T>& cache, const T* inp,
                     const T* dout, T* dinp, const Mamba2Grad<T>& grads, int b, int t, int c,
                     WgradSink<T>* wgrad = nullptr) {
  const Mamba2DimsD dm = mamba2_dims(cfg, b, t, c);
  const long nr = dm.rows();
  const int in = dm.in(), ch = dm.ch(), di = dm.di(), nh = dm.h, ns = dm.n, np = dm.p, gs = dm.gs();
  const T* zx = cache.zxbcdt.get();
  const T* pre = cache.xbc_pre.get();
  const T* xbc = cache.xbc.get();
  const T* dt = cache.dt.get();
  const T* y = cache.y.get();
  const T* rstd = cache.rstd.get();
  Buf<D, T> dnormed_buf, dz_buf, dy_buf, dxbc_buf, ddt_buf;
  dnormed_buf.assign_zero(static_cast<std::size_t>(nr) * di);
  dz_buf.assign_zero(static_cast<std::size_t>(nr) * in);
  dy_buf.assign_zero(static_cast<std::size_t>(nr) * di);
  dxbc_buf.assign_zero(static_cast<std::size_t>(nr) * ch);
  ddt_buf.assign_zero(static_cast<std::size_t>(nr) * nh);
  T *dnormed = dnormed_buf.get(), *dz = dz_buf.get(), *dy = dy_buf.get(), *dxbc = dxbc_buf.get();
  T* ddt = ddt_buf.get();

  // forward: out = normed W_out^T
  D::gemm(dnormed, dout, w.out_proj, static_cast<int>(nr), di, c, false, false, true);
  weight_gemm<D, T>(grads.out_proj, dout, cache.normed.get(), static_cast<int>(nr), di, c, wgrad);

  // forward: normed = rmsnorm_per_group(gated) norm, gated = y silu(z). gated is recomputed.
  const T* nw = w.norm;
  D::launch(nr * dm.g, [=] HT_HD(long i) {
    const long r = i / dm.g;
    const int gg = static_cast<int>(i % dm.g);
    const long o = r * di + static_cast<long>(gg) * gs;
    const long zo = r * in + static_cast<long>(gg) * gs;
    const T* wg = nw + gg * gs;
    const T rs = rstd[i];
    T dot = T(0);
    for (int j = 0; j < gs; ++j) dot += dnormed[o + j] * wg[j] * (y[o + j] * math::silu(zx[zo + j])) * rs;
    dot /= T(gs);
    for (int j = 0; j < gs; ++j) {
      const T z = zx[zo + j];
      const T xh = y[o + j] * math::silu(z) * rs;
      T dg = T(0);  // the CPU's zeroed dgated row, accumulated once
      dg += rs * (dnormed[o + j] * wg[j] - xh * dot);
      dy[o + j] += dg * math::silu(z);
      dz[zo + j] += dg * y[o + j] * math::silu_grad(z);
    }
  });
  // dnorm: one thread per weight, tokens in order.
  T* gnorm = grads.norm;
  D::launch(di, [=] HT_HD(long j) {
    const int gg = static_cast<int>(j / gs);
    T acc = gnorm[j];
    for (long r = 0; r < nr; ++r) {
      const T xh = y[r * di + j] * math::silu(zx[r * in + j]) * rstd[r * dm.g + gg];
      acc += dnormed[r * di + j] * xh;
    }
    gnorm[j] = acc;
  });

  // The scan. Pass 1, one thread per (sequence, head, row i): states s_0..s_T forward, then
  // dL/ds_t backward (ds_t = a_{t+1} ds_{t+1} + dy_t,i C_t) and dx_t,i, which only row i touches.
  const long nrow = static_cast<long>(dm.b) * nh * np;
  Buf<D, T> hist_buf(static_cast<std::size_t>(nrow) * (dm.t + 1) * ns), ds_buf(static_cast<std::size_t>(nrow) * dm.t * ns);
  Buf<D, T> state_buf(static_cast<std::size_t>(nrow) * ns);
  T *hist = hist_buf.get(), *dsb = ds_buf.get(), *state = state_buf.get();
  const T* alog = w.A_log;
  const T* dsk = w.D;
  D::launch(nrow, [=] HT_HD(long i) {
    const int ii = static_cast<int>(i % np);
    const int hh = static_cast<int>((i / np) % nh);
    const long r0 = (i / (static_cast<long>(np) * nh)) * dm.t;
    const int grp = hh / dm.hpg();
    const T A = -std::exp(alog[hh]);
    T* hi = hist + i * (dm.t + 1) * ns;
    T* dsi = dsb + i * dm.t * ns;
    mamba2_scan_row(dm, xbc + r0 * ch, dt + r0 * nh, static_cast<T*>(nullptr), state + i * ns, hi, A, dsk[hh], hh, ii);
    T a_next = T(0);
    for (int tt = dm.t - 1; tt >= 0; --tt) {
      const long r = r0 + tt;
      const T* row = xbc + r * ch;
      const T* bt = row + di + grp * ns;
      const T* ct = row + di + dm.g * ns + grp * ns;
      const T dyt = dy[r * di + hh * np + ii];
      const T dtt = dt[r * nh + hh];
      T* ds = dsi + static_cast<long>(tt) * ns;
      T& dx = dxbc[r * ch + hh * np + ii];
      // forward: y_t = h_t C_t + D x_t
      T acc = dx;
      acc += dsk[hh] * dyt;
      for (int j = 0; j < ns; ++j) {
        T d = tt == dm.t - 1 ? T(0) : a_next * ds[ns + j];
        d += dyt * ct[j];
        ds[j] = d;
      }
      // forward: h_t = a h_{t-1} + dt_t x_t B_t^T
      for (int j = 0; j < ns; ++j) acc += ds[j] * dtt * bt[j];
      dx = acc;
      a_next = std::exp(dtt * A);
    }
  });
  // Pass 2, one thread per (token, group, state n): dB and dC add over the group's heads, then
  // rows, in the CPU's (head, row) order.
  D::launch(nr * dm.g * ns, [=] HT_HD(long i) {
    const int j = static_cast<int>(i % ns);
    const int grp = static_cast<int>((i / ns) % dm.g);
    const long r = i / (static_cast<long>(ns) * dm.g);
    const long bb = r / dm.t;
    const int tt = static_cast<int>(r % dm.t);
    const T* row = xbc + r * ch;
    T& db = dxbc[r * ch + di + grp * ns + j];
    T& dc = dxbc[r * ch + di + dm.g * ns + grp * ns + j];
    T accb = db, accc = dc;
    for (int hh = grp * dm.hpg(); hh < (grp + 1) * dm.hpg(); ++hh) {
      const T dtt = dt[r * nh + hh];
      for (int ii = 0; ii < np; ++ii) {
        const long s = (bb * nh + hh) * np + ii;
        accc += dy[r * di + hh * np + ii] * hist[(s * (dm.t + 1) + tt + 1) * ns + j];
      }
      for (int ii = 0; ii < np; ++ii) {
        const long s = (bb * nh + hh) * np + ii;
        accb += dsb[(s * dm.t + tt) * ns + j] * dtt * row[hh * np + ii];
      }
    }
    db = accb;
    dc = accc;
  });
  // Pass 3, one thread per (sequence, head, token): da and ddt sum over (row, n) in the CPU's
  // order; the token's term of dA is kept for pass 4.
  Buf<D, T> dat_buf(static_cast<std::size_t>(nr) * nh);
  T* dat = dat_buf.get();
  D::launch(nr * nh, [=] HT_HD(long i) {
    const int tt = static_cast<int>(i % dm.t);
    const int hh = static_cast<int>((i / dm.t) % nh);
    const long bb = i / (static_cast<long>(dm.t) * nh);
    const long r = bb * dm.t + tt;
    const int grp = hh / dm.hpg();
    const T* row = xbc + r * ch;
    const T* bt = row + di + grp * ns;
    const T A = -std::exp(alog[hh]);
    const T dtt = dt[r * nh + hh];
    T da = T(0), ddtt = T(0);
    for (int ii = 0; ii < np; ++ii) {
      const long s = (bb * nh + hh) * np + ii;
      const T* ds = dsb + (s * dm.t + tt) * ns;
      const T* hprev = hist + (s * (dm.t + 1) + tt) * ns;
      const T xt = row[hh * np + ii];
      for (int j = 0; j < ns; ++j) {
        da += ds[j] * hprev[j];
        ddtt += ds[j] * bt[j] * xt;
      }
    }
    // forward: a = exp(dt_t A)
    const T a = std::exp(dtt * A);
    ddtt += da * a * A;
    dat[i] = da * a * dtt;
    ddt[r * nh + hh] += ddtt;
  });
  // Pass 4, one thread per head: dA_log and dD add over sequences, then time backwards, then rows.
  T* galog = grads.A_log;
  T* gd = grads.D;
  D::launch(nh, [=] HT_HD(long hh) {
    const T A = -std::exp(alog[hh]);
    T ga = galog[hh], gdd = gd[hh];
    for (long bb = 0; bb < dm.b; ++bb) {
      T dA = T(0);
      for (int tt = dm.t - 1; tt >= 0; --tt) {
        const long r = bb * dm.t + tt;
        dA += dat[(bb * nh + hh) * dm.t + tt];
        for (int ii = 0; ii < np; ++ii) gdd += dy[r * di + hh * np + ii] * xbc[r * ch + hh * np + ii];
      }
      // forward: A = -exp(A_log)
      ga += dA * A;
    }
    galog[hh] = ga;
    gd[hh] = gdd;
  });

  // forward: dt = softplus(dt_raw + dt_bias)
  const T* dtb = w.dt_bias;
  D::launch(nr * nh, [=] HT_HD(long i) {
    const long r = i / nh;
    const int hh = static_cast<int>(i % nh);
    const long zo = r * in + di + ch + hh;
    dz[zo] += ddt[i] * math::softplus_grad(zx[zo] + dtb[hh]);
  });
  T* gdtb = grads.dt_bias;
  D::launch(nh, [=] HT_HD(long hh) {
    T acc = gdtb[hh];
    for (long r = 0; r < nr; ++r) acc += ddt[r * nh + hh] * math::softplus_grad(zx[r * in + di + ch + hh] + dtb[hh]);
    gdtb[hh] = acc;
  });
  // forward: xbc = silu(xbc_pre)
  // forward: xbc = silu(causal_conv(zxbcdt[xBC]) + conv_bias)
  causal_conv_silu_backward<D, T>(dz + di, in, grads.conv_weight, grads.conv_bias, dxbc, pre, zx + di, w.conv_weight, nr,
                                  dm.t, ch, dm.k);
  // forward: zxbcdt = inp W_in^T
  D::gemm(dinp, dz, w.in_proj, static_cast<int>(nr), c, in, false, false, true);
  weight_gemm<D, T>(grads.in_proj, dz, inp, static_cast<int>(nr), c, in, wgrad);
}

}  // namespace ht::engine::dev
