// Specification of the Mamba2 mixer ('M'): its hand-written backward against float64 finite
// differences (fixed shape and rapidcheck-chosen shapes), its sequential scan against the
// quadratic "state-space dual" form, causality, determinism and config validation.
#include <rapidcheck/catch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>

#include "ht/engine/layers/mamba2.hpp"
#include "mixer_fd_check.hpp"

using namespace ht::engine;
using ht::engine::test::kMixerFdBound;

namespace {

ModelConfig mamba_cfg(int C, int H, int P, int N, int G, int K) {
  ModelConfig cfg;
  cfg.hidden = C;
  cfg.mamba_num_heads = H;
  cfg.mamba_head_dim = P;
  cfg.mamba_state_dim = N;
  cfg.mamba_num_groups = G;
  cfg.mamba_conv_kernel = K;
  cfg.init_std = 0.5f;
  return cfg;
}

// Parameters with generic values: dt of order 1 and moderate decay so the recurrence matters.
Mamba2Params<double> generic_params(const ModelConfig& cfg, Rng& rng) {
  Mamba2Params<double> p;
  mamba2_init(p, cfg, rng);
  test::perturb_params(p, rng, 0.3);
  for (auto& v : p.dt_bias.data) v = rng.uniform(-1.0, 1.0);
  for (auto& v : p.A_log.data) v = rng.uniform(-1.0, 1.0);
  return p;
}

test::FdResult fd_check(const ModelConfig& cfg, int B, int T, std::uint64_t seed) {
  Rng rng(seed);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({B, T, cfg.hidden}, rng);
  Mamba2Cache<double> cache;
  return test::mixer_fd_check(
      p, x, rng,
      [&](Mamba2Params<double>& pp, Tensor<double>& in, Tensor<double>& out) {
        mamba2_forward(cfg, pp, in, out, cache);
      },
      [&](Mamba2Params<double>& pp, Tensor<double>& in, Tensor<double>& dout, Tensor<double>& din,
          Mamba2Params<double>& g) { mamba2_backward(cfg, pp, cache, in, dout, din, g); });
}

}  // namespace

TEST_CASE("mamba2 backward matches float64 finite differences for the input and every parameter") {
  const auto cfg = mamba_cfg(6, 4, 3, 4, 2, 3);
  const auto r = fd_check(cfg, 2, 5, 1234);
  INFO(r.describe());
  REQUIRE(r.per_tensor.size() == 9);  // input + 8 parameter tensors
  for (const auto& [name, err] : r.per_tensor) {
    INFO(name);
    CHECK(err < kMixerFdBound);
  }
}

TEST_CASE("mamba2 backward matches finite differences on random small shapes", "[property]") {
  rc::prop("fd error below bound", [] {
    const int G = *rc::gen::inRange(1, 3);
    const int H = G * *rc::gen::inRange(1, 3);
    const int P = *rc::gen::inRange(1, 4);
    const int N = *rc::gen::inRange(1, 4);
    const int K = *rc::gen::inRange(1, 5);
    const int C = *rc::gen::inRange(1, 6);
    const int B = *rc::gen::inRange(1, 3);
    const int T = *rc::gen::inRange(1, 7);
    const auto seed = *rc::gen::arbitrary<std::uint32_t>();
    const auto r = fd_check(mamba_cfg(C, H, P, N, G, K), B, T, seed);
    RC_LOG() << r.describe();
    RC_ASSERT(r.worst() < kMixerFdBound);
  });
}

TEST_CASE("mamba2 scan equals the quadratic state-space-dual form") {
  // y_t = sum_{s<=t} (C_t . B_s) exp(A sum_{r=s+1..t} dt_r) dt_s x_s + D x_t, per head: the same
  // recurrence unrolled, computed without any state.
  const auto cfg = mamba_cfg(5, 4, 3, 4, 2, 3);
  const Mamba2Dims d = Mamba2Dims::from(cfg);
  Rng rng(77);
  auto p = generic_params(cfg, rng);
  const int B = 2, T = 7;
  auto x = test::random_tensor<double>({B, T, cfg.hidden}, rng);
  Tensor<double> out;
  Mamba2Cache<double> cache;
  mamba2_forward(cfg, p, x, out, cache);
  const int Ch = d.conv_dim(), DI = d.d_inner(), N = d.d_state, P = d.headdim;
  double worst = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < d.nheads; ++h) {
      const int g = h / (d.nheads / d.ngroups);
      const double A = -std::exp(p.A_log[h]);
      for (int t = 0; t < T; ++t)
        for (int i = 0; i < P; ++i) {
          auto xbc = [&](int s, int c) {
            return cache.xbc[(static_cast<std::size_t>(b) * T + s) * Ch + c];
          };
          auto dt = [&](int s) {
            return cache.dt[(static_cast<std::size_t>(b) * T + s) * d.nheads + h];
          };
          double y = p.D[h] * xbc(t, h * P + i);
          for (int s = 0; s <= t; ++s) {
            double cb = 0;
            for (int n = 0; n < N; ++n)
              cb += xbc(t, DI + d.ngroups * N + g * N + n) * xbc(s, DI + g * N + n);
            double decay = 0;
            for (int r = s + 1; r <= t; ++r) decay += dt(r);
            y += cb * std::exp(A * decay) * dt(s) * xbc(s, h * P + i);
          }
          const double got = cache.y[(static_cast<std::size_t>(b) * T + t) * DI + h * P + i];
          worst = std::max(worst, std::abs(got - y) / std::max(1.0, std::abs(y)));
        }
    }
  CHECK(worst < 1e-12);
}

TEST_CASE("mamba2 is causal: changing step t0 leaves earlier outputs bit-identical") {
  const auto cfg = mamba_cfg(4, 2, 2, 3, 1, 4);
  Rng rng(5);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({1, 6, 4}, rng);
  Tensor<double> out1, out2;
  Mamba2Cache<double> cache;
  mamba2_forward(cfg, p, x, out1, cache);
  const int t0 = 3;
  for (int c = 0; c < 4; ++c) x[t0 * 4 + c] += 1.0;
  mamba2_forward(cfg, p, x, out2, cache);
  for (int i = 0; i < t0 * 4; ++i) CHECK(out1[i] == out2[i]);
  bool changed = false;
  for (int i = t0 * 4; i < 6 * 4; ++i) changed = changed || out1[i] != out2[i];
  CHECK(changed);
}

TEST_CASE("mamba2 float32 forward/backward is deterministic and tracks float64") {
  const auto cfg = mamba_cfg(8, 4, 4, 4, 2, 4);
  Rng rng_d(9), rng_f(9);
  Mamba2Params<double> pd;
  Mamba2Params<float> pf;
  mamba2_init(pd, cfg, rng_d);
  mamba2_init(pf, cfg, rng_f);
  REQUIRE(pf.in_proj.size() == pd.in_proj.size());
  for (std::size_t i = 0; i < pd.in_proj.size(); ++i)
    REQUIRE(pf.in_proj[i] == static_cast<float>(pd.in_proj[i]));
  Rng rng(10);
  auto xd = test::random_tensor<double>({2, 5, 8}, rng);
  Tensor<float> xf(xd.shape);
  for (std::size_t i = 0; i < xd.size(); ++i) xf[i] = static_cast<float>(xd[i]);
  Tensor<double> od;
  Tensor<float> of1, of2;
  Mamba2Cache<double> cd;
  Mamba2Cache<float> cf;
  mamba2_forward(cfg, pd, xd, od, cd);
  mamba2_forward(cfg, pf, xf, of1, cf);
  mamba2_forward(cfg, pf, xf, of2, cf);
  CHECK(of1 == of2);
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < od.size(); ++i) {
    scale = std::max(scale, std::abs(od[i]));
    diff = std::max(diff, std::abs(od[i] - static_cast<double>(of1[i])));
  }
  CHECK(diff / scale < 1e-5);
  CHECK(mamba2_param_count(cfg) == [&] {
    std::size_t n = 0;
    Mamba2Params<float>::visit(pf, [&](const char*, Tensor<float>& t) { n += t.size(); });
    return n;
  }());
}

TEST_CASE("mamba2 rejects inconsistent configs and inputs with a clear exception") {
  auto cfg = mamba_cfg(4, 3, 2, 2, 2, 4);  // 3 heads, 2 groups
  Rng rng(1);
  Mamba2Params<float> p;
  CHECK_THROWS_AS(mamba2_init(p, cfg, rng), std::invalid_argument);
  cfg.mamba_num_heads = 4;
  mamba2_init(p, cfg, rng);
  Tensor<float> bad({1, 3, 5}), out;
  Mamba2Cache<float> cache;
  CHECK_THROWS_AS(mamba2_forward(cfg, p, bad, out, cache), std::invalid_argument);
  cfg.mamba_state_dim = 0;
  CHECK_THROWS_WITH(Mamba2Dims::from(cfg), Catch::Contains("mamba_state_dim"));
}
