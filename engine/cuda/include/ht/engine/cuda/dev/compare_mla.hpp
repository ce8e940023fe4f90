// The MLA mixer's rows of the layer comparison (dev/compare.hpp, which includes this header after
// struct Run): the CPU reference in float64 and float32 and the device layer (dev/mla.hpp) on the
// same float32-rounded data; out, dinp and every weight gradient of the variant cfg selects.
#pragma once

#include <algorithm>
#include <string>
#include <tuple>

#include "ht/engine/cuda/dev/mla.hpp"
#include "ht/engine/layers/mla.hpp"

namespace ht::engine::dev::compare {

template <class D, class TD>
void compare_mla(Run<D, TD>& run, Rng& rng, int b, int t, const ModelConfig& cfg) {
  const MlaDims md = MlaDims::from(cfg);
  const int c = cfg.hidden;
  const bool direct_q = md.q_lora_rank == 0;
  MlaParams<double> p64;
  mla_init<double>(p64, cfg, rng);
  // init_std 0.02 gives q, k of std ~0.1: near-uniform attention, the score path barely tested.
  for (auto* w : {&p64.q_proj, &p64.q_down, &p64.q_up, &p64.kv_down, &p64.kv_up, &p64.proj})
    for (auto& v : w->data) v *= 10;
  // The norm weights start at 1: a wrong channel index would read the same value.
  for (auto* w : {&p64.q_norm, &p64.kv_norm})
    for (auto& v : w->data) v += 0.25 * rng.normal();
  round_params(p64);
  const Tensor<double> x = normal({b, t, c}, rng), dy = normal({b, t, c}, rng);
  auto ref = [&](auto tag) {
    using T = decltype(tag);
    MlaParams<T> p, g;
    // visit() picks the variant from q_proj's rank, so the copies must have it before the casts.
    if (direct_q) p.q_proj = g.q_proj = Tensor<T>(p64.q_proj.shape);
    cast_params<T>(p64, p);
    zero_like<T>(p, g);
    MlaCache<T> cache;
    const auto xx = cast<T>(x), dd = cast<T>(dy);
    Tensor<T> y, dx(xx.shape);
    mla_forward<T>(cfg, p, xx, y, cache);
    mla_backward<T>(cfg, p, cache, xx, dd, dx, g);
    return std::tuple{y, dx, g};
  };
  const auto [y64, dx64, g64] = ref(double{});
  const auto [y32, dx32, g32] = ref(float{});

  auto xd = run.up(x), dyd = run.up(dy), dxd = run.zeros(x.size());
  MlaW<TD> w0;
  MlaGrad<TD> g0;
  w0.direct = g0.direct = direct_q;
  const auto set = run.params(p64, w0, g0);
  Buf<D, TD> yd(x.size());
  MlaCacheD<D, TD> cache;
  mla_forward<D, TD>(cfg, set.w, xd.get(), yd.get(), b, t, c, cache);
  mla_backward<D, TD>(cfg, set.w, cache, xd.get(), dyd.get(), dxd.get(), set.g, b, t, c);

  // K: the forward reaches the scores through the q or kv chain (C, then the norm's row sum and
  // the up projection), the score dot (dq), the softmax sum and o's sum over keys (t each), and
  // proj (H dv). The backward core adds proj^T (C), datt (dv), the softmax dot (t) and the dQ, dK,
  // dV sums over t; dinp then adds the longer of the q and kv paths back to the input (the kv one
  // either through kv_up^T and the norm, or through the H-head kpe sum, then kv_down^T); a weight
  // gradient adds its n tokens.
  const int n = b * t, H = md.nheads, qr = md.q_lora_rank, kvr = md.kv_lora_rank;
  const int dq = md.qk_dim(), dv = md.v_head_dim, qud = md.q_up_dim(), kvud = md.kv_up_dim(), kvd = md.kv_down_dim();
  const int qch = direct_q ? c : c + 2 * qr, kvch = c + 2 * kvr;
  const int fwd = std::max(qch, kvch) + dq + 2 * t;
  const int core = fwd + c + dv + 2 * t;
  const int qback = direct_q ? qud : qud + 2 * qr;
  const int kvback = std::max(kvud + kvr, H) + kvd;
  const std::string L = "mla";
  run.add(L, "out", fwd + H * dv, y64, y32, run.down(yd));
  run.add(L, "dinp", core + std::max(qback, kvback), dx64, dx32, run.down(dxd));
  if (direct_q) {
    run.add(L, "dq_proj", core + n, g64.q_proj, g32.q_proj, run.grad(set, p64.q_proj));
  } else {
    run.add(L, "dq_down", core + qud + qr + n, g64.q_down, g32.q_down, run.grad(set, p64.q_down));
    run.add(L, "dq_norm", core + qud + n, g64.q_norm, g32.q_norm, run.grad(set, p64.q_norm));
    run.add(L, "dq_up", core + n, g64.q_up, g32.q_up, run.grad(set, p64.q_up));
  }
  run.add(L, "dkv_down", core + std::max(kvud + kvr, H) + n, g64.kv_down, g32.kv_down, run.grad(set, p64.kv_down));
  run.add(L, "dkv_norm", core + kvud + n, g64.kv_norm, g32.kv_norm, run.grad(set, p64.kv_norm));
  run.add(L, "dkv_up", core + n, g64.kv_up, g32.kv_up, run.grad(set, p64.kv_up));
  run.add(L, "dproj", fwd + n, g64.proj, g32.proj, run.grad(set, p64.proj));
}

}  // namespace ht::engine::dev::compare
