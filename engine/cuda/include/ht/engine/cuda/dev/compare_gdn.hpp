// The Gated DeltaNet mixer's rows of the layer comparison (dev/compare.hpp, which includes this
// header after struct Run): the CPU reference in float64 and float32 and the device layer
// (dev/gdn.hpp) on the same float32-rounded data; out, dinp and every weight gradient.
#pragma once

#include <string>
#include <tuple>

#include "ht/engine/cuda/dev/gdn.hpp"
#include "ht/engine/layers/gdn.hpp"

namespace ht::engine::dev::compare {

template <class D, class TD>
void compare_gdn(Run<D, TD>& run, Rng& rng, int b, int t, const ModelConfig& cfg) {
  const GdnDims gd = GdnDims::from(cfg);
  const int c = cfg.hidden;
  GdnParams<double> p64;
  gdn_init<double>(p64, cfg, rng);
  // init_std 0.02 leaves in_proj outputs ~0.15: SiLU near linear, beta ~ 1/2 for every head, z's
  // gate near 0.
  for (auto* w : {&p64.in_proj, &p64.out_proj})
    for (auto& v : w->data) v *= 10;
  // The norm weight starts at 1: a wrong channel index would read the same value.
  for (auto& v : p64.out_norm.data) v += 0.25 * rng.normal();
  round_params(p64);
  const Tensor<double> x = normal({b, t, c}, rng), dy = normal({b, t, c}, rng);
  auto ref = [&](auto tag) {
    using T = decltype(tag);
    GdnParams<T> p, g;
    cast_params<T>(p64, p);
    zero_like<T>(p, g);
    GdnCache<T> cache;
    const auto xx = cast<T>(x), dd = cast<T>(dy);
    Tensor<T> y, dx(xx.shape);
    gdn_forward<T>(cfg, p, xx, y, cache);
    gdn_backward<T>(cfg, p, cache, xx, dd, dx, g);
    return std::tuple{y, dx, g};
  };
  const auto [y64, dx64, g64] = ref(double{});
  const auto [y32, dx32, g32] = ref(float{});

  auto xd = run.up(x), dyd = run.up(dy), dxd = run.zeros(x.size());
  const auto set = run.params(p64, GdnW<TD>{}, GdnGrad<TD>{});
  Buf<D, TD> yd(x.size());
  GdnCacheD<D, TD> cache;
  gdn_forward<D, TD>(cfg, set.w, xd.get(), yd.get(), b, t, c, cache);
  gdn_backward<D, TD>(cfg, set.w, cache, xd.get(), dyd.get(), dxd.get(), set.g, b, t, c);

  // K: the forward reaches o through in_proj (C), the conv (K taps), the l2 norm (dk), the delta
  // rule (T steps, each a dk sum for S k, then S q's dk sum); out adds the output norm's row (dv)
  // and out_proj (Hv dv). The backward adds out_proj^T (C), the norm's row (dv), dL/dS over T
  // steps and the largest per-step sum (dg's, over the (dv, dk) state); dinp then the l2 norm
  // (dk), the conv (K) and in_proj^T (in); a weight gradient adds its n tokens.
  const int n = b * t, dk = gd.head_k_dim, dv = gd.head_v_dim, kc = gd.d_conv;
  const int fwd = c + kc + dk + t + 2 * dk;
  const int bwd = c + dv + t + dv * dk;
  const std::string L = "gdn";
  run.add(L, "out", fwd + dv + gd.value_dim(), y64, y32, run.down(yd));
  run.add(L, "dinp", fwd + bwd + dk + kc + gd.in_proj_dim(), dx64, dx32, run.down(dxd));
  run.add(L, "din_proj", fwd + bwd + dk + kc + n, g64.in_proj, g32.in_proj, run.grad(set, p64.in_proj));
  run.add(L, "dconv_weight", fwd + bwd + dk + n, g64.conv_weight, g32.conv_weight, run.grad(set, p64.conv_weight));
  run.add(L, "ddt_bias", fwd + bwd + n, g64.dt_bias, g32.dt_bias, run.grad(set, p64.dt_bias));
  run.add(L, "dA_log", fwd + bwd + n, g64.A_log, g32.A_log, run.grad(set, p64.A_log));
  run.add(L, "dout_norm", fwd + c + dv + n * gd.num_v_heads, g64.out_norm, g32.out_norm, run.grad(set, p64.out_norm));
  run.add(L, "dout_proj", fwd + dv + n, g64.out_proj, g32.out_proj, run.grad(set, p64.out_proj));
}

}  // namespace ht::engine::dev::compare
