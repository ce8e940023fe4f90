// Specification of the Gated DeltaNet mixer ('G'): its hand-written backward against float64
// finite differences (fixed shapes and rapidcheck-chosen shapes, with and without grouped value
// heads), its rank-1 delta-rule update against the textbook matrix form, causality,
// determinism and config validation.
#include <rapidcheck/catch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "ht/engine/layers/gdn.hpp"
#include "mixer_fd_check.hpp"

using namespace ht::engine;
using ht::engine::test::kMixerFdBound;

namespace {

ModelConfig gdn_cfg(int C, int Hk, int Hv, int dk, int dv, int K) {
  ModelConfig cfg;
  cfg.hidden = C;
  cfg.gdn_num_heads = Hk;
  cfg.gdn_num_v_heads = Hv;
  cfg.gdn_head_dim_qk = dk;
  cfg.gdn_head_dim_v = dv;
  cfg.gdn_conv_kernel = K;
  cfg.init_std = 0.5f;
  return cfg;
}

// Generic values: decays exp(g) spread over (0, 1) and betas away from 0 and 1.
GdnParams<double> generic_params(const ModelConfig& cfg, Rng& rng) {
  GdnParams<double> p;
  gdn_init(p, cfg, rng);
  test::perturb_params(p, rng, 0.3);
  for (auto& v : p.dt_bias.data) v = rng.uniform(-1.0, 1.0);
  for (auto& v : p.A_log.data) v = rng.uniform(-1.5, 0.5);
  return p;
}

test::FdResult fd_check(const ModelConfig& cfg, int B, int T, std::uint64_t seed) {
  Rng rng(seed);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({B, T, cfg.hidden}, rng);
  GdnCache<double> cache;
  return test::mixer_fd_check(
      p, x, rng,
      [&](GdnParams<double>& pp, Tensor<double>& in, Tensor<double>& out) {
        gdn_forward(cfg, pp, in, out, cache);
      },
      [&](GdnParams<double>& pp, Tensor<double>& in, Tensor<double>& dout, Tensor<double>& din,
          GdnParams<double>& g) { gdn_backward(cfg, pp, cache, in, dout, din, g); });
}

}  // namespace

TEST_CASE("gdn backward matches float64 finite differences for the input and every parameter") {
  for (const auto& cfg : {gdn_cfg(6, 2, 2, 3, 4, 3), gdn_cfg(5, 1, 3, 4, 2, 4)}) {
    const auto r = fd_check(cfg, 2, 5, 4321);
    INFO(r.describe());
    REQUIRE(r.per_tensor.size() == 7);  // input + 6 parameter tensors
    for (const auto& [name, err] : r.per_tensor) {
      INFO(name);
      CHECK(err < kMixerFdBound);
    }
  }
}

TEST_CASE("gdn backward matches finite differences on random small shapes", "[property]") {
  rc::prop("fd error below bound", [] {
    const int Hk = *rc::gen::inRange(1, 3);
    const int Hv = Hk * *rc::gen::inRange(1, 3);
    const int dk = *rc::gen::inRange(1, 5);
    const int dv = *rc::gen::inRange(1, 4);
    const int K = *rc::gen::inRange(1, 5);
    const int C = *rc::gen::inRange(1, 6);
    const int B = *rc::gen::inRange(1, 3);
    const int T = *rc::gen::inRange(1, 7);
    const auto seed = *rc::gen::arbitrary<std::uint32_t>();
    const auto r = fd_check(gdn_cfg(C, Hk, Hv, dk, dv, K), B, T, seed);
    RC_LOG() << r.describe();
    RC_ASSERT(r.worst() < kMixerFdBound);
  });
}

TEST_CASE("gdn delta rule equals the matrix form S_t = e^g S (I - b k k^T) + b v k^T") {
  const auto cfg = gdn_cfg(5, 2, 4, 3, 2, 3);
  const GdnDims d = GdnDims::from(cfg);
  Rng rng(31);
  auto p = generic_params(cfg, rng);
  const int B = 2, T = 6;
  auto x = test::random_tensor<double>({B, T, cfg.hidden}, rng);
  Tensor<double> out;
  GdnCache<double> cache;
  gdn_forward(cfg, p, x, out, cache);
  const int dk = d.head_k_dim, dv = d.head_v_dim, KD = d.key_dim(), VD = d.value_dim();
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int hv = 0; hv < d.num_v_heads; ++hv) {
      const int hk = hv / (d.num_v_heads / d.num_k_heads);
      std::vector<double> S(dv * dk, 0.0);
      for (int t = 0; t < T; ++t) {
        const std::size_t r = static_cast<std::size_t>(b) * T + t;
        const double* q = cache.qn.ptr() + r * KD + hk * dk;
        const double* k = cache.kn.ptr() + r * KD + hk * dk;
        const double* v = cache.qkv.ptr() + r * d.conv_dim() + 2 * KD + hv * dv;
        const double beta = cache.beta[r * d.num_v_heads + hv];
        const double decay = std::exp(cache.g[r * d.num_v_heads + hv]);
        // M = I - beta k k^T;  S <- decay S M + beta v k^T
        std::vector<double> next(dv * dk, 0.0);
        for (int i = 0; i < dv; ++i)
          for (int j = 0; j < dk; ++j) {
            double acc = 0;
            for (int l = 0; l < dk; ++l)
              acc += S[i * dk + l] * ((l == j ? 1.0 : 0.0) - beta * k[l] * k[j]);
            next[i * dk + j] = decay * acc + beta * v[i] * k[j];
          }
        S = next;
        for (int i = 0; i < dv; ++i) {
          double o = 0;
          for (int j = 0; j < dk; ++j) o += S[i * dk + j] * q[j];
          o /= std::sqrt(static_cast<double>(dk));
          worst = std::max(worst, std::abs(o - cache.o[r * VD + hv * dv + i]));
        }
      }
    }
  CHECK(worst < 1e-12);
}

TEST_CASE("gdn l2-normalises q and k per head") {
  const auto cfg = gdn_cfg(4, 2, 2, 3, 2, 2);
  Rng rng(3);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({1, 4, 4}, rng);
  Tensor<double> out;
  GdnCache<double> cache;
  gdn_forward(cfg, p, x, out, cache);
  for (std::size_t r = 0; r < 4; ++r)
    for (int h = 0; h < 2; ++h) {
      double ss = 0, raw = 0;
      for (int j = 0; j < 3; ++j) {
        ss += cache.kn[r * 6 + h * 3 + j] * cache.kn[r * 6 + h * 3 + j];
        raw += cache.qkv[r * 16 + 6 + h * 3 + j] *
               cache.qkv[r * 16 + 6 + h * 3 + j];  // conv_dim 16, k at 6
      }
      CHECK(ss == Approx(raw / (raw + 1e-6)).epsilon(1e-12));
    }
}

TEST_CASE("gdn is causal: changing step t0 leaves earlier outputs bit-identical") {
  const auto cfg = gdn_cfg(4, 1, 2, 3, 2, 4);
  Rng rng(5);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({1, 6, 4}, rng);
  Tensor<double> out1, out2;
  GdnCache<double> cache;
  gdn_forward(cfg, p, x, out1, cache);
  const int t0 = 2;
  for (int c = 0; c < 4; ++c) x[t0 * 4 + c] += 1.0;
  gdn_forward(cfg, p, x, out2, cache);
  for (int i = 0; i < t0 * 4; ++i) CHECK(out1[i] == out2[i]);
  bool changed = false;
  for (int i = t0 * 4; i < 6 * 4; ++i) changed = changed || out1[i] != out2[i];
  CHECK(changed);
}

TEST_CASE("gdn float32 forward is deterministic and tracks float64") {
  const auto cfg = gdn_cfg(8, 2, 4, 4, 4, 4);
  Rng rng_d(9), rng_f(9);
  GdnParams<double> pd;
  GdnParams<float> pf;
  gdn_init(pd, cfg, rng_d);
  gdn_init(pf, cfg, rng_f);
  Rng rng(10);
  auto xd = test::random_tensor<double>({2, 5, 8}, rng);
  Tensor<float> xf(xd.shape);
  for (std::size_t i = 0; i < xd.size(); ++i) xf[i] = static_cast<float>(xd[i]);
  Tensor<double> od;
  Tensor<float> of1, of2;
  GdnCache<double> cd;
  GdnCache<float> cf;
  gdn_forward(cfg, pd, xd, od, cd);
  gdn_forward(cfg, pf, xf, of1, cf);
  gdn_forward(cfg, pf, xf, of2, cf);
  CHECK(of1 == of2);
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < od.size(); ++i) {
    scale = std::max(scale, std::abs(od[i]));
    diff = std::max(diff, std::abs(od[i] - static_cast<double>(of1[i])));
  }
  CHECK(diff / scale < 1e-5);
  std::size_t n = 0;
  GdnParams<float>::visit(pf, [&](const char*, Tensor<float>& t) { n += t.size(); });
  CHECK(gdn_param_count(cfg) == n);
}

TEST_CASE("gdn rejects inconsistent configs and inputs with a clear exception") {
  auto cfg = gdn_cfg(4, 2, 3, 2, 2, 4);  // 3 value heads over 2 key heads
  Rng rng(1);
  GdnParams<float> p;
  CHECK_THROWS_WITH(gdn_init(p, cfg, rng), Catch::Contains("gdn_num_v_heads"));
  cfg.gdn_num_v_heads = 4;
  gdn_init(p, cfg, rng);
  Tensor<float> bad({2, 3}), out;
  GdnCache<float> cache;
  CHECK_THROWS_AS(gdn_forward(cfg, p, bad, out, cache), std::invalid_argument);
}
