// The body of compare_layers_host / compare_layers_cuda (layer_compare.hpp), a template over the
// device policy D and the scalar TD the layers under test run in; included by one host source and
// one CUDA source. Inputs and weights are drawn in float64, rounded to float32 once, and that same
// rounded data feeds the float64 CPU reference, the float32 CPU reference and the layer under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/engine/cuda/dev/attention.hpp"
#include "ht/engine/cuda/dev/basic.hpp"
#include "ht/engine/cuda/dev/moe.hpp"
#include "ht/engine/cuda/dev/swiglu.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/rng.hpp"

namespace ht::engine::dev::compare {

using cuda::LayerComparison;

template <class To, class From>
Tensor<To> cast(const Tensor<From>& t) {
  Tensor<To> out;
  out.shape = t.shape;
  out.data.assign(t.data.begin(), t.data.end());
  return out;
}
// Rounds every value to float32 and back, so float64 and float32 runs see identical data.
inline void round_f32(Tensor<double>& t) {
  for (auto& v : t.data) v = static_cast<double>(static_cast<float>(v));
}
inline Tensor<double> normal(std::vector<int> shape, Rng& rng, double std = 1.0, double mean = 0.0) {
  Tensor<double> t(std::move(shape));
  for (auto& v : t.data) v = mean + std * rng.normal();
  round_f32(t);
  return t;
}
template <class P>
void round_params(P& p) {
  P::visit(p, [](const std::string&, Tensor<double>& t) { round_f32(t); });
}
template <class To, template <class> class P>
void cast_params(const P<double>& src, P<To>& dst) {
  std::vector<const Tensor<double>*> list;
  P<double>::visit(src, [&](const std::string&, const Tensor<double>& t) { list.push_back(&t); });
  std::size_t i = 0;
  P<To>::visit(dst, [&](const std::string&, Tensor<To>& t) { t = cast<To>(*list.at(i++)); });
}
template <class T, template <class> class P>
void zero_like(const P<T>& src, P<T>& dst) {
  std::vector<const Tensor<T>*> list;
  P<T>::visit(src, [&](const std::string&, const Tensor<T>& t) { list.push_back(&t); });
  std::size_t i = 0;
  P<T>::visit(dst, [&](const std::string&, Tensor<T>& t) { t = Tensor<T>(list.at(i++)->shape); });
}

template <class D, class TD>
struct Run {
  std::vector<LayerComparison>& out;

  template <class T>
  Buf<D, TD> up(const Tensor<T>& t) {
    const std::vector<TD> v(t.data.begin(), t.data.end());
    return upload<D>(v.data(), v.size());
  }
  Buf<D, int> up_int(const std::vector<int>& v) { return upload<D>(v.data(), v.size()); }
  Buf<D, TD> zeros(std::size_t n) {
    Buf<D, TD> b;
    b.assign_zero(n);
    return b;
  }
  std::vector<double> down(const Buf<D, TD>& b) {
    std::vector<TD> v(b.size());
    D::download(v.data(), b.get(), v.size());
    return {v.begin(), v.end()};
  }

  // A float64 parameter set P on the device for its layer's pointer sets (W, G: structs whose
  // members carry P's names, shaped like p64 where P's visit needs it): every weight uploaded,
  // every gradient zero, bound by name; grad(member of p64) downloads that member's gradient.
  template <class W, class G>
  struct Set {
    W w;
    G g;
    std::vector<Buf<D, TD>> values, grads;
    std::map<const Tensor<double>*, std::size_t> of;
  };
  template <class P, class W, class G>
  Set<W, G> params(const P& p64, W w, G g) {
    Set<W, G> s{std::move(w), std::move(g), {}, {}, {}};
    std::map<std::string, std::size_t> at;
    P::visit(p64, [&](const std::string& name, const Tensor<double>& t) {
      at[name] = s.of[&t] = s.values.size();
      s.values.push_back(up(t));
      s.grads.push_back(zeros(t.size()));
    });
    P::visit(s.w, [&](const std::string& name, const TD*& slot) { slot = s.values[at.at(name)].get(); });
    P::visit(s.g, [&](const std::string& name, TD*& slot) { slot = s.grads[at.at(name)].get(); });
    return s;
  }
  template <class W, class G>
  std::vector<double> grad(const Set<W, G>& s, const Tensor<double>& member) {
    return down(s.grads[s.of.at(&member)]);
  }

  void add(const std::string& layer, const std::string& qty, int depth, const std::vector<double>& ref,
           const std::vector<double>& cpu, const std::vector<double>& dev) {
    LayerComparison c;
    c.layer = layer;
    c.quantity = qty;
    c.depth = depth;
    if (ref.size() != cpu.size() || ref.size() != dev.size()) {
      c.err_dev = c.diff_cpu = INFINITY;  // a size mismatch is a failure, reported as such
    } else {
      for (std::size_t i = 0; i < ref.size(); ++i) {
        c.scale = std::max(c.scale, std::fabs(ref[i]));
        c.err_ref = std::max(c.err_ref, std::fabs(cpu[i] - ref[i]));
        const double e = std::fabs(dev[i] - ref[i]);
        c.err_dev = std::isnan(e) ? INFINITY : std::max(c.err_dev, e);
        const double ec = std::fabs(dev[i] - cpu[i]);
        c.diff_cpu = std::isnan(ec) ? INFINITY : std::max(c.diff_cpu, ec);
      }
    }
    c.bound = 4 * c.err_ref + 2.0 * depth * 0x1p-24 * c.scale;
    c.pass = c.err_dev <= c.bound;
    out.push_back(c);
  }
  template <class A, class B>
  void add(const std::string& layer, const std::string& qty, int depth, const Tensor<double>& ref, const Tensor<A>& cpu,
           const B& dev) {
    add(layer, qty, depth, ref.data, std::vector<double>(cpu.data.begin(), cpu.data.end()), dev);
  }
  void add_scalar(const std::string& layer, const std::string& qty, int depth, double ref, double cpu, double dev) {
    add(layer, qty, depth, std::vector<double>{ref}, std::vector<double>{cpu}, std::vector<double>{dev});
  }

  void rmsnorm(Rng& rng, int n, const ModelConfig& cfg) {
    const int c = cfg.hidden;
    const Tensor<double> x = normal({n, c}, rng), w = normal({c}, rng, 0.1, 1.0), dy = normal({n, c}, rng);
    Tensor<double> y64, dx64({n, c}), dw64({c});
    RMSNormCache<double> c64;
    rmsnorm_forward<double>(y64, c64, x, w, cfg.norm_eps);
    rmsnorm_backward<double>(dx64, dw64, dy, x, w, c64);
    Tensor<float> y32, dx32({n, c}), dw32({c});
    RMSNormCache<float> c32;
    const auto xf = cast<float>(x), wf = cast<float>(w), dyf = cast<float>(dy);
    rmsnorm_forward<float>(y32, c32, xf, wf, cfg.norm_eps);
    rmsnorm_backward<float>(dx32, dw32, dyf, xf, wf, c32);
    auto xd = up(x), wd = up(w), dyd = up(dy);
    Buf<D, TD> yd(x.size()), rstd(static_cast<std::size_t>(n));
    auto dxd = zeros(x.size()), dwd = zeros(w.size());
    rmsnorm_forward<D, TD>(yd.get(), rstd.get(), xd.get(), wd.get(), n, c, static_cast<TD>(cfg.norm_eps));
    rmsnorm_backward<D, TD>(dxd.get(), dwd.get(), dyd.get(), xd.get(), wd.get(), rstd.get(), n, c);
    add("rmsnorm", "out", c, y64, y32, down(yd));
    add("rmsnorm", "dinp", 2 * c, dx64, dx32, down(dxd));
    add("rmsnorm", "dweight", n + c, dw64, dw32, down(dwd));
  }

  void embedding(Rng& rng, int n, const ModelConfig& cfg) {
    const int v = cfg.vocab_size, c = cfg.hidden;
    Tensor<int> tok({n});
    for (auto& id : tok.data) id = rng.below(std::max(1, v / 8));  // repeats, so rows accumulate
    check_tokens(tok.data, v);
    const Tensor<double> wte = normal({v, c}, rng), dy = normal({n, c}, rng);
    Tensor<double> y64, dw64({v, c});
    embedding_forward<double>(y64, tok, wte);
    embedding_backward<double>(dw64, dy, tok);
    Tensor<float> y32, dw32({v, c});
    embedding_forward<float>(y32, tok, cast<float>(wte));
    embedding_backward<float>(dw32, cast<float>(dy), tok);
    auto td = up_int(tok.data);
    auto wd = up(wte), dyd = up(dy);
    Buf<D, TD> yd(static_cast<std::size_t>(n) * c);
    auto dwd = zeros(wte.size());
    embedding_forward<D, TD>(yd.get(), td.get(), wd.get(), n, c);
    embedding_backward<D, TD>(dwd.get(), dyd.get(), td.get(), n, c);
    add("embedding", "out", 1, y64, y32, down(yd));
    add("embedding", "dweight", n, dw64, dw32, down(dwd));
  }

  void output_ce(Rng& rng, int n, const ModelConfig& cfg) {
    const int v = cfg.vocab_size, c = cfg.hidden;
    const Tensor<double> h = normal({n, c}, rng), w = normal({v, c}, rng, 0.2);
    Tensor<int> tgt({n});
    for (auto& t : tgt.data) t = rng.below(v);
    Tensor<double> wt({n});
    for (int i = 0; i < n; ++i) wt[static_cast<std::size_t>(i)] = i % 5 == 4 ? 0.0 : 1.0;  // some rows masked
    const double dloss = 1.0 / n;
    auto ref = [&](auto tag) {
      using T = decltype(tag);
      const auto hh = cast<T>(h), ww = cast<T>(w), wts = cast<T>(wt);
      Tensor<T> logits, dlog({n, v}), dh({n, c}), dw({v, c});
      output_forward<T>(logits, hh, ww);
      CrossEntropyCache<T> cache;
      const T loss = cross_entropy_forward<T>(cache, logits, tgt, wts);
      cross_entropy_backward<T>(dlog, logits, tgt, wts, cache, static_cast<T>(dloss));
      output_backward<T>(dh, dw, dlog, hh, ww);
      return std::tuple{logits, static_cast<double>(loss), dh, dw};
    };
    const auto [l64, loss64, dh64, dw64] = ref(double{});
    const auto [l32, loss32, dh32, dw32] = ref(float{});
    auto hd = up(h), wd = up(w), wtd = up(wt);
    auto td = up_int(tgt.data);
    Buf<D, TD> logits(static_cast<std::size_t>(n) * v), lse(static_cast<std::size_t>(n));
    auto dlog = zeros(logits.size()), dhd = zeros(h.size()), dwd = zeros(w.size());
    output_forward<D, TD>(logits.get(), hd.get(), wd.get(), n, c, v);
    const TD loss = cross_entropy_forward<D, TD>(lse.get(), logits.get(), td.get(), wtd.get(), n, v);
    cross_entropy_backward<D, TD>(dlog.get(), logits.get(), td.get(), wtd.get(), lse.get(), n, v, static_cast<TD>(dloss));
    output_backward<D, TD>(dhd.get(), dwd.get(), dlog.get(), hd.get(), wd.get(), n, c, v);
    add("output+ce", "logits", c, l64, l32, down(logits));
    add_scalar("output+ce", "loss", c + v + n, loss64, loss32, loss);
    add("output+ce", "dinp", v + c, dh64, dh32, down(dhd));
    add("output+ce", "dweight", v + n, dw64, dw32, down(dwd));
  }

  void mlp(Rng& rng, int n, const ModelConfig& cfg) {
    const int c = cfg.hidden, f = cfg.ffn_hidden;
    const Tensor<double> x = normal({n, c}, rng), fc1 = normal({2 * f, c}, rng, 0.2), fc2 = normal({c, f}, rng, 0.2),
                         dy = normal({n, c}, rng);
    auto ref = [&](auto tag) {
      using T = decltype(tag);
      SwiGLUWeights<T> w{cast<T>(fc1), cast<T>(fc2)}, g{Tensor<T>({2 * f, c}), Tensor<T>({c, f})};
      SwiGLUCache<T> cache;
      const auto xx = cast<T>(x), dd = cast<T>(dy);
      Tensor<T> y({n, c}), dx({n, c});
      swiglu_forward<T>(y.ptr(), cache, xx.ptr(), n, w);
      swiglu_backward<T>(dx.ptr(), g, dd.ptr(), xx.ptr(), n, w, cache);
      return std::tuple{y, dx, g.fc1, g.fc2};
    };
    const auto [y64, dx64, g164, g264] = ref(double{});
    const auto [y32, dx32, g132, g232] = ref(float{});
    auto xd = up(x), f1 = up(fc1), f2 = up(fc2), dyd = up(dy);
    auto dxd = zeros(x.size()), d1 = zeros(fc1.size()), d2 = zeros(fc2.size());
    Buf<D, TD> yd(x.size());
    SwiGLUCacheD<D, TD> cache;
    const SwiGLUW<TD> w{f1.get(), f2.get(), c, f};
    swiglu_forward<D, TD>(yd.get(), cache, xd.get(), n, w);
    swiglu_backward<D, TD>(dxd.get(), SwiGLUGrad<TD>{d1.get(), d2.get()}, dyd.get(), xd.get(), n, w, cache);
    add("mlp", "out", c + f, y64, y32, down(yd));
    add("mlp", "dinp", c + 2 * f, dx64, dx32, down(dxd));
    add("mlp", "dfc1", c + n, g164, g132, down(d1));
    add("mlp", "dfc2", c + n, g264, g232, down(d2));
  }

  void attention(Rng& rng, int b, int t, const ModelConfig& cfg, int window) {
    const std::string name = window > 0 ? "attention_window" : "attention";
    const int c = cfg.hidden, n = b * t, hd = cfg.num_heads * cfg.head_dim;
    AttentionParams<double> p64;
    attention_init<double>(p64, cfg, rng);
    for (auto* w : {&p64.qkv, &p64.proj})
      for (auto& v : w->data) v *= 10;  // init_std 0.02 would leave near-uniform attention
    round_params(p64);
    const Tensor<double> x = normal({b, t, c}, rng), dy = normal({b, t, c}, rng);
    auto ref = [&](auto tag) {
      using T = decltype(tag);
      AttentionParams<T> p, g;
      cast_params<T>(p64, p);
      zero_like<T>(p, g);
      AttentionCache<T> cache;
      const auto xx = cast<T>(x), dd = cast<T>(dy);
      Tensor<T> y, dx(xx.shape);
      attention_forward<T>(cfg, p, xx, y, cache, window);
      attention_backward<T>(cfg, p, cache, xx, dd, dx, g, window);
      return std::tuple{y, dx, g.qkv, g.proj};
    };
    const auto [y64, dx64, q64, pr64] = ref(double{});
    const auto [y32, dx32, q32, pr32] = ref(float{});
    auto xd = up(x), dyd = up(dy), dxd = zeros(x.size());
    const auto set = params(p64, AttnW<TD>{}, AttnGrad<TD>{});
    Buf<D, TD> yd(x.size());
    AttnCacheD<D, TD> cache;
    attention_forward<D, TD>(cfg, set.w, xd.get(), yd.get(), b, t, c, cache, window);
    attention_backward<D, TD>(cfg, set.w, cache, xd.get(), dyd.get(), dxd.get(), set.g, b, t, c, window);
    const int d = cfg.head_dim;
    add(name, "out", c + d + t + hd, y64, y32, down(yd));
    add(name, "dinp", c + 2 * d + 2 * t + hd, dx64, dx32, down(dxd));
    add(name, "dqkv", c + 2 * d + 2 * t + n, q64, q32, grad(set, p64.qkv));
    add(name, "dproj", n, pr64, pr32, grad(set, p64.proj));
  }

  void moe(Rng& rng, int n, ModelConfig cfg) {
    const int c = cfg.hidden, e = cfg.num_experts;
    if (cfg.moe_shared_ffn_hidden == 0) cfg.moe_shared_ffn_hidden = cfg.moe_ffn_hidden;
    MoeParams<double> p64;
    moe_init<double>(p64, cfg, rng);
    for (auto& v : p64.router.data) v *= 2.5;  // router logits of std ~2: clear but unsaturated choices
    MoeParams<double>::visit(p64, [](const std::string&, Tensor<double>& t) {
      for (auto& v : t.data) v *= 5;  // std 0.1: expert outputs of order 1
    });
    round_params(p64);
    const Tensor<double> x = normal({n, c}, rng), dy = normal({n, c}, rng);
    const double scale = 0.5;
    auto ref = [&](auto tag) {
      using T = decltype(tag);
      MoeParams<T> p, g;
      p.experts.resize(p64.experts.size());
      p.has_shared = p64.has_shared;
      cast_params<T>(p64, p);
      g.experts.resize(p.experts.size());
      g.has_shared = p.has_shared;
      zero_like<T>(p, g);
      MoeCache<T> cache;
      const auto xx = cast<T>(x), dd = cast<T>(dy);
      Tensor<T> y, dx(xx.shape);
      moe_forward<T>(cfg, p, xx, y, cache, static_cast<T>(scale));
      moe_backward<T>(cfg, p, cache, xx, dd, dx, g, static_cast<T>(scale));
      std::vector<double> dexp;
      for (const auto& ex : g.experts) {
        dexp.insert(dexp.end(), ex.fc1.data.begin(), ex.fc1.data.end());
        dexp.insert(dexp.end(), ex.fc2.data.begin(), ex.fc2.data.end());
      }
      std::vector<double> dsh(g.shared.fc1.data.begin(), g.shared.fc1.data.end());
      dsh.insert(dsh.end(), g.shared.fc2.data.begin(), g.shared.fc2.data.end());
      return std::tuple{cast<double>(y), cast<double>(dx), cast<double>(g.router), dexp, dsh,
                        static_cast<double>(cache.routing.aux_loss), static_cast<double>(cache.routing.z_loss)};
    };
    const auto [y64, dx64, r64, e64, s64, aux64, z64] = ref(double{});
    const auto [y32, dx32, r32, e32, s32, aux32, z32] = ref(float{});

    MoeW<TD> w0;
    MoeGrad<TD> g0;
    w0.experts.resize(p64.experts.size());
    g0.experts.resize(p64.experts.size());
    w0.has_shared = g0.has_shared = p64.has_shared;
    auto set = params(p64, w0, g0);
    for (std::size_t i = 0; i <= p64.experts.size(); ++i) {  // the experts, then the shared expert
      const bool shared = i == p64.experts.size();
      auto& sw = shared ? set.w.shared : set.w.experts[i];
      sw.c = c;
      sw.f = (shared ? p64.shared : p64.experts[i]).fc2.dim(1);
    }
    const auto& w = set.w;
    auto& g = set.g;
    auto xd = up(x), dyd = up(dy);
    auto dxd = zeros(x.size());
    Buf<D, TD> yd(x.size());
    MoeCacheD<D, TD> cache;
    moe_forward<D, TD>(cfg, w, xd.get(), yd.get(), n, c, cache, static_cast<TD>(scale));
    moe_backward<D, TD>(cfg, w, cache, xd.get(), dyd.get(), dxd.get(), g, c, static_cast<TD>(scale));
    std::vector<double> dexp, dsh;
    for (const auto& ex : p64.experts)
      for (const auto* m : {&ex.fc1, &ex.fc2}) {
        const auto d = grad(set, *m);
        dexp.insert(dexp.end(), d.begin(), d.end());
      }
    for (const auto* m : {&p64.shared.fc1, &p64.shared.fc2}) {
      const auto d = grad(set, *m);
      dsh.insert(dsh.end(), d.begin(), d.end());
    }
    const int f = cfg.moe_ffn_hidden;
    add("moe", "out", c + 2 * f + e, y64.data, y32.data, down(yd));
    add_scalar("moe", "aux_loss", e + n, aux64, aux32, cache.aux_loss);
    add_scalar("moe", "z_loss", e + n, z64, z32, cache.z_loss);
    add("moe", "dinp", 2 * c + 3 * f + 2 * e, dx64.data, dx32.data, down(dxd));
    add("moe", "drouter", c + f + e + n, r64.data, r32.data, grad(set, p64.router));
    add("moe", "dexperts", c + f + n, e64, e32, dexp);
    add("moe", "dshared", c + f + n, s64, s32, dsh);
  }
};

}  // namespace ht::engine::dev::compare

// The mixers' comparisons use Run (above).
#include "ht/engine/cuda/dev/compare_gdn.hpp"
#include "ht/engine/cuda/dev/compare_mamba2.hpp"
#include "ht/engine/cuda/dev/compare_mla.hpp"

namespace ht::engine::dev::compare {

template <class D, class TD>
std::vector<LayerComparison> compare_layers(std::uint64_t seed, const cuda::LayerShape& shape) {
  std::vector<LayerComparison> out;
  Run<D, TD> run{out};
  Rng rng(seed, "cuda-layer-compare");
  const int n = shape.batch * shape.seq;
  run.rmsnorm(rng, n, shape.cfg);
  run.embedding(rng, n, shape.cfg);
  run.output_ce(rng, n, shape.cfg);
  run.mlp(rng, n, shape.cfg);
  run.attention(rng, shape.batch, shape.seq, shape.cfg, 0);
  run.attention(rng, shape.batch, shape.seq, shape.cfg, shape.cfg.window);
  run.moe(rng, n, shape.cfg);
  compare_mamba2<D, TD>(run, rng, shape.batch, shape.seq, shape.cfg);
  compare_gdn<D, TD>(run, rng, shape.batch, shape.seq, shape.cfg);
  compare_mla<D, TD>(run, rng, shape.batch, shape.seq, shape.cfg);
  return out;
}

}  // namespace ht::engine::dev::compare
