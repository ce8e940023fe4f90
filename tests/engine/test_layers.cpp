// Hand-written backward of every core layer against float64 central finite differences of the
// same templated code (rapidcheck picks shapes and seeds), plus closed-form forward cases.
// Bound: max over entries of |analytic - numeric| / max(|analytic|, |numeric|, 1e-2) < 1e-5;
// with h = 1e-5 the expected error of smooth float64 layers is ~1e-9.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <vector>

#include "fd.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/swiglu.hpp"

using namespace ht::engine;
using ht::engine::test::dot;
using ht::engine::test::max_fd_error;
using ht::engine::test::random_tensor;
using TD = Tensor<double>;

namespace {
constexpr double kTol = 1e-5;

// Runs `fwd(out)` for a branch-like layer, backward with dout = probe, and checks every listed
// tensor against finite differences of L = <out, probe>. Returns the worst error.
template <class Fwd, class Bwd>
double check_layer(std::vector<std::pair<TD*, TD*>> wrt, Fwd fwd, Bwd bwd, const TD& probe) {
  bwd(probe);
  double worst = 0;
  for (auto [x, g] : wrt) worst = std::max(worst, max_fd_error(*x, *g, [&] { return fwd(); }));
  return worst;
}

TD zeros_like(const TD& t) { return TD(t.shape); }

double rmsnorm_case(int n, int c, std::uint64_t seed) {
  Rng rng(seed);
  TD x = random_tensor<double>({n, c}, rng), w = random_tensor<double>({c}, rng);
  TD probe = random_tensor<double>({n, c}, rng), dx = zeros_like(x), dw = zeros_like(w);
  auto fwd = [&] {
    TD out;
    RMSNormCache<double> cache;
    rmsnorm_forward(out, cache, x, w, 1e-5);
    return dot(out, probe);
  };
  auto bwd = [&](const TD& dout) {
    TD out;
    RMSNormCache<double> cache;
    rmsnorm_forward(out, cache, x, w, 1e-5);
    rmsnorm_backward(dx, dw, dout, x, w, cache);
  };
  return check_layer({{&x, &dx}, {&w, &dw}}, fwd, bwd, probe);
}

double mlp_case(int b, int t, int c, int f, std::uint64_t seed) {
  Rng rng(seed);
  ModelConfig cfg;
  cfg.hidden = c;
  cfg.ffn_hidden = f;
  cfg.init_std = 0.5f;
  MlpParams<double> p, g;
  mlp_init(p, cfg, rng);
  g.w.fc1 = zeros_like(p.w.fc1);
  g.w.fc2 = zeros_like(p.w.fc2);
  TD x = random_tensor<double>({b, t, c}, rng), probe = random_tensor<double>({b, t, c}, rng);
  TD dx = zeros_like(x);
  auto fwd = [&] {
    TD out;
    MlpCache<double> cache;
    mlp_forward(cfg, p, x, out, cache);
    return dot(out, probe);
  };
  auto bwd = [&](const TD& dout) {
    TD out;
    MlpCache<double> cache;
    mlp_forward(cfg, p, x, out, cache);
    mlp_backward(cfg, p, cache, x, dout, dx, g);
  };
  return check_layer({{&x, &dx}, {&p.w.fc1, &g.w.fc1}, {&p.w.fc2, &g.w.fc2}}, fwd, bwd, probe);
}

struct AttnShape {
  int b, t, c, h, g, d, window;
  bool rope;
};

double attention_case(const AttnShape& s, std::uint64_t seed) {
  Rng rng(seed);
  ModelConfig cfg;
  cfg.hidden = s.c;
  cfg.num_heads = s.h;
  cfg.num_kv_heads = s.g;
  cfg.head_dim = s.d;
  cfg.rope = s.rope;
  cfg.init_std = 0.5f;
  AttentionParams<double> p, g;
  attention_init(p, cfg, rng);
  g.qkv = zeros_like(p.qkv);
  g.proj = zeros_like(p.proj);
  TD x = random_tensor<double>({s.b, s.t, s.c}, rng), probe = random_tensor<double>({s.b, s.t, s.c}, rng);
  TD dx = zeros_like(x);
  auto fwd = [&] {
    TD out;
    AttentionCache<double> cache;
    attention_forward(cfg, p, x, out, cache, s.window);
    return dot(out, probe);
  };
  auto bwd = [&](const TD& dout) {
    TD out;
    AttentionCache<double> cache;
    attention_forward(cfg, p, x, out, cache, s.window);
    attention_backward(cfg, p, cache, x, dout, dx, g, s.window);
  };
  return check_layer({{&x, &dx}, {&p.qkv, &g.qkv}, {&p.proj, &g.proj}}, fwd, bwd, probe);
}

double moe_case(int n, int c, int e, int k, bool shared, std::uint64_t seed) {
  Rng rng(seed);
  ModelConfig cfg;
  cfg.hidden = c;
  cfg.num_experts = e;
  cfg.moe_topk = k;
  cfg.moe_ffn_hidden = 3;
  cfg.moe_shared_ffn_hidden = shared ? 2 : 0;
  cfg.moe_aux_loss_coeff = 0.7f;  // large so the loss terms' gradients are visible to FD
  cfg.moe_z_loss_coeff = 0.3f;
  cfg.init_std = 0.5f;
  const double scale = 0.5;  // as inside a 2-depth MTP
  MoeParams<double> p, g;
  moe_init(p, cfg, rng);
  g = p;
  MoeParams<double>::visit(g, [](const std::string&, TD& t) { t.zero(); });
  TD x = random_tensor<double>({1, n, c}, rng), probe = random_tensor<double>({1, n, c}, rng);
  TD dx = zeros_like(x);
  // Top-k selection is not differentiable where the k-th and (k+1)-th logits of a token tie: a
  // finite-difference step that flips the selection measures a jump, not a slope. Such inputs
  // (seed 3737084597074937204 drew one: 2 experts, top-1, a gap below the step's effect) are
  // outside the property; -1 tells the caller to discard the case.
  if (k < e) {
    TD out;
    MoeCache<double> cache;
    moe_forward(cfg, p, x, out, cache, scale);
    for (int t = 0; t < n; ++t) {
      std::vector<double> row;
      for (int j = 0; j < e; ++j) row.push_back(cache.routing.logits[static_cast<std::size_t>(t * e + j)]);
      std::sort(row.begin(), row.end(), std::greater<>());
      if (row[static_cast<std::size_t>(k - 1)] - row[static_cast<std::size_t>(k)] < 1e-3) return -1;
    }
  }
  auto fwd = [&] {
    TD out;
    MoeCache<double> cache;
    moe_forward(cfg, p, x, out, cache, scale);
    return dot(out, probe) + cache.routing.aux_loss + cache.routing.z_loss;
  };
  auto bwd = [&](const TD& dout) {
    TD out;
    MoeCache<double> cache;
    moe_forward(cfg, p, x, out, cache, scale);
    moe_backward(cfg, p, cache, x, dout, dx, g, scale);
  };
  std::vector<std::pair<TD*, TD*>> wrt{{&x, &dx}};
  std::vector<TD*> ps, gs;
  MoeParams<double>::visit(p, [&](const std::string&, TD& t) { ps.push_back(&t); });
  MoeParams<double>::visit(g, [&](const std::string&, TD& t) { gs.push_back(&t); });
  for (size_t i = 0; i < ps.size(); ++i) wrt.emplace_back(ps[i], gs[i]);
  return check_layer(wrt, fwd, bwd, probe);
}
}  // namespace

TEST_CASE("rmsnorm backward matches finite differences", "[engine][fd][property]") {
  rc::prop("rmsnorm fd", [] {
    const int n = *rc::gen::inRange(1, 5), c = *rc::gen::inRange(1, 9);
    const double err = rmsnorm_case(n, c, *rc::gen::inRange(0, 1 << 30));
    RC_ASSERT(err < kTol);
  });
}

TEST_CASE("swiglu mlp backward matches finite differences", "[engine][fd][property]") {
  rc::prop("mlp fd", [] {
    const int b = *rc::gen::inRange(1, 3), t = *rc::gen::inRange(1, 4);
    const int c = *rc::gen::inRange(1, 6), f = *rc::gen::inRange(1, 6);
    RC_ASSERT(mlp_case(b, t, c, f, *rc::gen::inRange(0, 1 << 30)) < kTol);
  });
}

TEST_CASE("attention backward matches finite differences (GQA, RoPE, window)", "[engine][fd][property]") {
  rc::prop("attention fd", [] {
    AttnShape s{};
    s.b = *rc::gen::inRange(1, 3);
    s.t = *rc::gen::inRange(1, 6);
    s.c = *rc::gen::inRange(2, 6);
    s.g = *rc::gen::inRange(1, 3);
    s.h = s.g * *rc::gen::inRange(1, 3);
    s.d = 2 * *rc::gen::inRange(1, 3);
    s.rope = *rc::gen::arbitrary<bool>();
    s.window = *rc::gen::inRange(0, 4);
    RC_ASSERT(attention_case(s, *rc::gen::inRange(0, 1 << 30)) < kTol);
  });
}

TEST_CASE("moe backward matches finite differences (router, experts, shared, aux, z)", "[engine][fd][property]") {
  rc::prop("moe fd", [] {
    const int e = *rc::gen::inRange(1, 5);
    const int k = *rc::gen::inRange(1, e + 1);
    const int n = *rc::gen::inRange(1, 6), c = *rc::gen::inRange(1, 5);
    const double err = moe_case(n, c, e, k, *rc::gen::arbitrary<bool>(), *rc::gen::inRange(0, 1 << 30));
    RC_PRE(err >= 0);  // a near-tie of routing logits: finite differences do not apply
    RC_ASSERT(err < kTol);
  });
}

TEST_CASE("cross entropy and output layer backward match finite differences", "[engine][fd][property]") {
  rc::prop("ce fd", [] {
    const int n = *rc::gen::inRange(1, 6), c = *rc::gen::inRange(1, 5), v = *rc::gen::inRange(2, 8);
    Rng rng(*rc::gen::inRange(0, 1 << 30));
    TD h = random_tensor<double>({1, n, c}, rng), w = random_tensor<double>({v, c}, rng);
    Tensor<int> tgt({n});
    TD weights({n});
    for (int i = 0; i < n; ++i) {
      tgt[static_cast<size_t>(i)] = rng.below(v);
      weights[static_cast<size_t>(i)] = rng.uniform() < 0.25 ? 0.0 : rng.uniform(0.1, 1.0);
    }
    auto loss = [&] {
      TD logits;
      output_forward(logits, h, w);
      CrossEntropyCache<double> cache;
      return cross_entropy_forward(cache, logits, tgt, weights);
    };
    TD logits;
    output_forward(logits, h, w);
    CrossEntropyCache<double> cache;
    cross_entropy_forward(cache, logits, tgt, weights);
    TD dlogits(logits.shape), dh(h.shape), dw(w.shape);
    cross_entropy_backward(dlogits, logits, tgt, weights, cache, 1.0);
    output_backward(dh, dw, dlogits, h, w);
    RC_ASSERT(max_fd_error(h, dh, loss) < kTol);
    RC_ASSERT(max_fd_error(w, dw, loss) < kTol);
  });
}

TEST_CASE("embedding backward matches finite differences", "[engine][fd][property]") {
  rc::prop("embedding fd", [] {
    const int b = *rc::gen::inRange(1, 3), t = *rc::gen::inRange(1, 6), v = *rc::gen::inRange(1, 6);
    const int c = *rc::gen::inRange(1, 4);
    Rng rng(*rc::gen::inRange(0, 1 << 30));
    TD wte = random_tensor<double>({v, c}, rng), probe = random_tensor<double>({b, t, c}, rng);
    Tensor<int> tok({b, t});
    for (auto& id : tok.data) id = rng.below(v);
    auto loss = [&] {
      TD out;
      embedding_forward(out, tok, wte);
      return dot(out, probe);
    };
    TD dwte(wte.shape);
    embedding_backward(dwte, probe, tok);
    RC_ASSERT(max_fd_error(wte, dwte, loss) < kTol);
  });
}

TEST_CASE("largest finite-difference errors per layer at fixed seeds", "[engine][fd]") {
  // Fixed, slightly larger shapes; the printed numbers go into the report.
  const double e_norm = rmsnorm_case(6, 16, 1);
  const double e_mlp = mlp_case(2, 5, 8, 12, 2);
  const double e_attn = attention_case({2, 7, 8, 4, 2, 4, 0, true}, 3);
  const double e_win = attention_case({2, 7, 8, 4, 2, 4, 3, true}, 4);
  const double e_moe = moe_case(9, 6, 4, 2, true, 5);
  std::cerr << "FD max rel err: rmsnorm " << e_norm << " mlp " << e_mlp << " attention " << e_attn
            << " window " << e_win << " moe " << e_moe << "\n";
  CHECK(e_norm < kTol);
  CHECK(e_mlp < kTol);
  CHECK(e_attn < kTol);
  CHECK(e_win < kTol);
  CHECK(e_moe < kTol);
}

TEST_CASE("attention with window 1 returns each token's own value projection", "[engine][attention]") {
  // Closed form: with one visible key the softmax weight is 1, so o_t = v_t exactly.
  ModelConfig cfg;
  cfg.hidden = 6;
  cfg.num_heads = 2;
  cfg.num_kv_heads = 1;
  cfg.head_dim = 4;
  Rng rng(11);
  AttentionParams<double> p;
  attention_init(p, cfg, rng);
  TD x = random_tensor<double>({1, 5, 6}, rng), out;
  AttentionCache<double> cache;
  attention_forward(cfg, p, x, out, cache, 1);
  // v of group 0 sits at rows [2D, 3D) of linear_qkv (per-group order q0 q1 k v).
  for (int t = 0; t < 5; ++t)
    for (int hh = 0; hh < 2; ++hh)
      for (int i = 0; i < 4; ++i) {
        double v = 0;
        for (int j = 0; j < 6; ++j) v += p.qkv[static_cast<size_t>((12 + i) * 6 + j)] * x[static_cast<size_t>(t * 6 + j)];
        CHECK(cache.o[static_cast<size_t>(t * 8 + hh * 4 + i)] == Approx(v).epsilon(1e-12));
      }
}

TEST_CASE("moe router breaks ties towards the lower expert index", "[engine][moe]") {
  ModelConfig cfg;
  cfg.hidden = 2;
  cfg.num_experts = 4;
  cfg.moe_topk = 2;
  Rng rng(1);
  MoeParams<float> p;
  moe_init(p, cfg, rng);
  p.router.zero();  // all logits equal: experts 0 and 1 must win, with equal weights
  std::vector<float> x{1.f, 2.f, -3.f, 0.5f}, permuted;
  MoeRouting<float> r;
  moe_route_permute(cfg, p, x.data(), 2, 1.f, r, permuted);
  CHECK(r.topk_idx == std::vector<int>{0, 1, 0, 1});
  CHECK(r.topk_w == std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f});
  CHECK(r.tokens_per_expert == std::vector<int>{2, 2, 0, 0});
  // Expert-major permutation, token order inside an expert.
  CHECK(r.row_token == std::vector<int>{0, 1, 0, 1});
}

TEST_CASE("moe losses match their closed form for a uniform router", "[engine][moe]") {
  // p = 1/E everywhere and sum_i tokens_i = N k, so aux = E c/(k N^2) * (N/E) * N k = c, and
  // z = c_z * log(E)^2.
  ModelConfig cfg;
  cfg.hidden = 3;
  cfg.num_experts = 5;
  cfg.moe_topk = 3;
  cfg.moe_aux_loss_coeff = 0.25f;
  cfg.moe_z_loss_coeff = 0.125f;
  Rng rng(2);
  MoeParams<double> p;
  moe_init(p, cfg, rng);
  p.router.zero();
  TD x = random_tensor<double>({1, 7, 3}, rng);
  std::vector<double> permuted;
  MoeRouting<double> r;
  moe_route_permute(cfg, p, x.ptr(), 7, 1.0, r, permuted);
  CHECK(r.aux_loss == Approx(0.25).epsilon(1e-12));
  CHECK(r.z_loss == Approx(0.125 * std::log(5.0) * std::log(5.0)).epsilon(1e-12));
}

TEST_CASE("cross entropy of uniform logits is log V", "[engine][ce]") {
  TD logits({3, 8});
  Tensor<int> tgt({3});
  tgt.data = {0, 5, 7};
  TD w({3});
  w.data = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  CrossEntropyCache<double> cache;
  CHECK(cross_entropy_forward(cache, logits, tgt, w) == Approx(std::log(8.0)).epsilon(1e-14));
}
