// The Mamba2 mixer's rows of the layer comparison (dev/compare.hpp, which includes this header
// after struct Run): the CPU reference in float64 and float32 and the device layer (dev/mamba2.hpp)
// on the same float32-rounded data; out, dinp and every weight gradient.
#pragma once

#include <string>
#include <tuple>

#include "ht/engine/cuda/dev/mamba2.hpp"
#include "ht/engine/layers/mamba2.hpp"

namespace ht::engine::dev::compare {

template <class D, class TD>
void compare_mamba2(Run<D, TD>& run, Rng& rng, int b, int t, const ModelConfig& cfg) {
  const Mamba2Dims md = Mamba2Dims::from(cfg);
  const int c = cfg.hidden;
  Mamba2Params<double> p64;
  mamba2_init<double>(p64, cfg, rng);
  // init_std 0.02 leaves in_proj outputs ~0.15: SiLU and softplus near linear, dt ~ dt_bias only.
  for (auto* w : {&p64.in_proj, &p64.out_proj})
    for (auto& v : w->data) v *= 10;
  // D and the norm weight start at 1: a wrong head or channel index would read the same value.
  for (auto* w : {&p64.D, &p64.norm})
    for (auto& v : w->data) v += 0.25 * rng.normal();
  round_params(p64);
  const Tensor<double> x = normal({b, t, c}, rng), dy = normal({b, t, c}, rng);
  auto ref = [&](auto tag) {
    using T = decltype(tag);
    Mamba2Params<T> p, g;
    cast_params<T>(p64, p);
    zero_like<T>(p, g);
    Mamba2Cache<T> cache;
    const auto xx = cast<T>(x), dd = cast<T>(dy);
    Tensor<T> y, dx(xx.shape);
    mamba2_forward<T>(cfg, p, xx, y, cache);
    mamba2_backward<T>(cfg, p, cache, xx, dd, dx, g);
    return std::tuple{y, dx, g};
  };
  const auto [y64, dx64, g64] = ref(double{});
  const auto [y32, dx32, g32] = ref(float{});

  auto xd = run.up(x), dyd = run.up(dy), dxd = run.zeros(x.size());
  const auto set = run.params(p64, Mamba2W<TD>{}, Mamba2Grad<TD>{});
  Buf<D, TD> yd(x.size());
  Mamba2CacheD<D, TD> cache;
  mamba2_forward<D, TD>(cfg, set.w, xd.get(), yd.get(), b, t, c, cache);
  mamba2_backward<D, TD>(cfg, set.w, cache, xd.get(), dyd.get(), dxd.get(), set.g, b, t, c);

  // K: the forward reaches y through in_proj (C), the conv (K taps), the scan (T steps, then a sum
  // over N); the backward adds out_proj^T (C), the norm's row sum (GS), dL/ds over T steps, the
  // (P, N) sums of d dt, the conv (K) and in_proj^T (IN); a weight gradient adds its n tokens
  // (and P channels for D).
  const int n = b * t, ns = md.d_state, np = md.headdim, kc = md.d_conv, gs = md.d_inner() / md.ngroups;
  const int fwd = c + kc + t + ns;
  const int bwd = c + gs + t + np * ns;
  const std::string L = "mamba2";
  run.add(L, "out", fwd + gs + md.d_inner(), y64, y32, run.down(yd));
  run.add(L, "dinp", fwd + bwd + kc + md.in_proj_dim(), dx64, dx32, run.down(dxd));
  run.add(L, "din_proj", fwd + bwd + kc + n, g64.in_proj, g32.in_proj, run.grad(set, p64.in_proj));
  run.add(L, "dconv_weight", fwd + bwd + n, g64.conv_weight, g32.conv_weight, run.grad(set, p64.conv_weight));
  run.add(L, "dconv_bias", fwd + bwd + n, g64.conv_bias, g32.conv_bias, run.grad(set, p64.conv_bias));
  run.add(L, "ddt_bias", fwd + bwd + n, g64.dt_bias, g32.dt_bias, run.grad(set, p64.dt_bias));
  run.add(L, "dA_log", fwd + bwd + n, g64.A_log, g32.A_log, run.grad(set, p64.A_log));
  run.add(L, "dD", fwd + c + gs + n * np, g64.D, g32.D, run.grad(set, p64.D));
  run.add(L, "dnorm", fwd + c + n, g64.norm, g32.norm, run.grad(set, p64.norm));
  run.add(L, "dout_proj", fwd + gs + n, g64.out_proj, g32.out_proj, run.grad(set, p64.out_proj));
}

}  // namespace ht::engine::dev::compare
