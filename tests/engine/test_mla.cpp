// Specification of multi-head latent attention ('+'): its hand-written backward against float64
// finite differences (with and without the rotary part, rapidcheck-chosen shapes), a one-token
// hand case, causality, determinism and config validation.
#include <rapidcheck/catch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/layers/mla.hpp"
#include "mixer_fd_check.hpp"

using namespace ht::engine;
using ht::engine::test::kMixerFdBound;

namespace {

ModelConfig mla_cfg(int C, int H, int qr, int kvr, int dn, int dr, int dv, bool rope = true) {
  ModelConfig cfg;
  cfg.hidden = C;
  cfg.num_heads = H;
  cfg.mla_q_lora_rank = qr;
  cfg.mla_kv_lora_rank = kvr;
  cfg.mla_qk_head_dim = dn;
  cfg.mla_qk_pos_head_dim = dr;
  cfg.mla_v_head_dim = dv;
  cfg.rope = rope;
  cfg.rope_theta = 100.f;  // large angles already at small T, so the rotation matters
  cfg.init_std = 0.6f;
  return cfg;
}

MlaParams<double> generic_params(const ModelConfig& cfg, Rng& rng) {
  MlaParams<double> p;
  mla_init(p, cfg, rng);
  test::perturb_params(p, rng, 0.3);
  return p;
}

test::FdResult fd_check(const ModelConfig& cfg, int B, int T, std::uint64_t seed) {
  Rng rng(seed);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({B, T, cfg.hidden}, rng);
  MlaCache<double> cache;
  return test::mixer_fd_check(
      p, x, rng,
      [&](MlaParams<double>& pp, Tensor<double>& in, Tensor<double>& out) {
        mla_forward(cfg, pp, in, out, cache);
      },
      [&](MlaParams<double>& pp, Tensor<double>& in, Tensor<double>& dout, Tensor<double>& din,
          MlaParams<double>& g) { mla_backward(cfg, pp, cache, in, dout, din, g); });
}

}  // namespace

TEST_CASE("mla backward matches float64 finite differences for the input and every parameter") {
  for (const auto& cfg : {mla_cfg(6, 2, 4, 3, 3, 2, 3, true), mla_cfg(6, 2, 4, 3, 3, 2, 3, false),
                          mla_cfg(5, 3, 3, 4, 2, 0, 2, true), mla_cfg(6, 2, 0, 3, 3, 2, 3, true)}) {
    const auto r = fd_check(cfg, 2, 5, 999);
    INFO(r.describe());
    // input + 7 parameter tensors, or + 5 with the direct query projection (q_lora_rank 0)
    REQUIRE(r.per_tensor.size() == (cfg.mla_q_lora_rank > 0 ? 8u : 6u));
    for (const auto& [name, err] : r.per_tensor) {
      INFO(name);
      CHECK(err < kMixerFdBound);
    }
  }
}

TEST_CASE("mla backward matches finite differences on random small shapes", "[property]") {
  rc::prop("fd error below bound", [] {
    const int H = *rc::gen::inRange(1, 3);
    const int qr = *rc::gen::inRange(0, 4);  // 0 = direct query projection
    const int kvr = *rc::gen::inRange(1, 4);
    const int dn = *rc::gen::inRange(1, 3);
    const int dr = 2 * *rc::gen::inRange(0, 2);
    const int dv = *rc::gen::inRange(1, 3);
    const int C = *rc::gen::inRange(1, 5);
    const int B = *rc::gen::inRange(1, 3);
    const int T = *rc::gen::inRange(1, 6);
    const bool rope = *rc::gen::arbitrary<bool>();
    const auto seed = *rc::gen::arbitrary<std::uint32_t>();
    const auto r = fd_check(mla_cfg(C, H, qr, kvr, dn, dr, dv, rope), B, T, seed);
    RC_LOG() << r.describe();
    RC_ASSERT(r.worst() < kMixerFdBound);
  });
}

TEST_CASE("mla on a single token returns its own value and ignores the query path") {
  // softmax over one key is 1, so out = V W_o^T with V from the kv path only; the q path gets
  // exactly zero gradient.
  const auto cfg = mla_cfg(4, 2, 3, 3, 2, 2, 2);
  Rng rng(12);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({1, 1, 4}, rng);
  Tensor<double> out;
  MlaCache<double> cache;
  mla_forward(cfg, p, x, out, cache);
  // latent = rmsnorm(x W_kvd^T [:kvr]) * kv_norm; v_h = latent W_kvu[h rows dn..dn+dv)^T
  std::vector<double> lat(3);
  double ss = 0;
  for (int i = 0; i < 3; ++i) {
    for (int c = 0; c < 4; ++c) lat[i] += x[c] * p.kv_down[i * 4 + c];
    ss += lat[i] * lat[i];
  }
  const double rstd = 1.0 / std::sqrt(ss / 3 + static_cast<double>(cfg.norm_eps));
  for (int i = 0; i < 3; ++i) lat[i] *= rstd * p.kv_norm[i];
  std::vector<double> v(4);  // H * dv
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 3; ++i) v[h * 2 + j] += lat[i] * p.kv_up[(h * 4 + 2 + j) * 3 + i];
  for (int c = 0; c < 4; ++c) {
    double want = 0;
    for (int j = 0; j < 4; ++j) want += v[j] * p.proj[c * 4 + j];
    CHECK(out[c] == Approx(want).epsilon(1e-12));
  }
  MlaParams<double> g;
  g.q_down = Tensor<double>(p.q_down.shape);
  g.q_norm = Tensor<double>(p.q_norm.shape);
  g.q_up = Tensor<double>(p.q_up.shape);
  g.kv_down = Tensor<double>(p.kv_down.shape);
  g.kv_norm = Tensor<double>(p.kv_norm.shape);
  g.kv_up = Tensor<double>(p.kv_up.shape);
  g.proj = Tensor<double>(p.proj.shape);
  Tensor<double> dout({1, 1, 4}), dx({1, 1, 4});
  dout.data = {1.0, -2.0, 0.5, 3.0};
  mla_backward(cfg, p, cache, x, dout, dx, g);
  for (double d : g.q_down.data) CHECK(d == 0.0);
  for (double d : g.q_up.data) CHECK(d == 0.0);
  for (double d : g.q_norm.data) CHECK(d == 0.0);
}

TEST_CASE("mla is causal: changing step t0 leaves earlier outputs bit-identical") {
  const auto cfg = mla_cfg(4, 2, 3, 3, 2, 2, 2);
  Rng rng(5);
  auto p = generic_params(cfg, rng);
  auto x = test::random_tensor<double>({1, 6, 4}, rng);
  Tensor<double> out1, out2;
  MlaCache<double> cache;
  mla_forward(cfg, p, x, out1, cache);
  const int t0 = 3;
  for (int c = 0; c < 4; ++c) x[t0 * 4 + c] += 1.0;
  mla_forward(cfg, p, x, out2, cache);
  for (int i = 0; i < t0 * 4; ++i) CHECK(out1[i] == out2[i]);
  bool changed = false;
  for (int i = t0 * 4; i < 6 * 4; ++i) changed = changed || out1[i] != out2[i];
  CHECK(changed);
}

TEST_CASE("mla float32 forward is deterministic and tracks float64") {
  auto cfg = mla_cfg(8, 2, 6, 6, 4, 4, 4);
  cfg.init_std = 0.3f;
  Rng rng_d(9), rng_f(9);
  MlaParams<double> pd;
  MlaParams<float> pf;
  mla_init(pd, cfg, rng_d);
  mla_init(pf, cfg, rng_f);
  Rng rng(10);
  auto xd = test::random_tensor<double>({2, 5, 8}, rng);
  Tensor<float> xf(xd.shape);
  for (std::size_t i = 0; i < xd.size(); ++i) xf[i] = static_cast<float>(xd[i]);
  Tensor<double> od;
  Tensor<float> of1, of2;
  MlaCache<double> cd;
  MlaCache<float> cf;
  mla_forward(cfg, pd, xd, od, cd);
  mla_forward(cfg, pf, xf, of1, cf);
  mla_forward(cfg, pf, xf, of2, cf);
  CHECK(of1 == of2);
  double scale = 0, diff = 0;
  for (std::size_t i = 0; i < od.size(); ++i) {
    scale = std::max(scale, std::abs(od[i]));
    diff = std::max(diff, std::abs(od[i] - static_cast<double>(of1[i])));
  }
  CHECK(diff / scale < 1e-5);
  std::size_t n = 0;
  MlaParams<float>::visit(pf, [&](const char*, Tensor<float>& t) { n += t.size(); });
  CHECK(mla_param_count(cfg) == n);
}

TEST_CASE("mla rejects inconsistent configs and inputs with a clear exception") {
  auto cfg = mla_cfg(4, 2, 3, 3, 2, 3, 2);  // odd rotary dim
  Rng rng(1);
  MlaParams<float> p;
  CHECK_THROWS_WITH(mla_init(p, cfg, rng), Catch::Contains("mla_qk_pos_head_dim"));
  cfg.mla_qk_pos_head_dim = 2;
  cfg.mla_q_lora_rank = -1;
  CHECK_THROWS_WITH(mla_init(p, cfg, rng), Catch::Contains("mla_q_lora_rank"));
  cfg.mla_q_lora_rank = 3;
  mla_init(p, cfg, rng);
  Tensor<float> bad({1, 2, 3}), out;
  MlaCache<float> cache;
  CHECK_THROWS_AS(mla_forward(cfg, p, bad, out, cache), std::invalid_argument);
}

TEST_CASE("mla parameter count and names follow the query variant") {
  for (int qr : {0, 5}) {
    const auto cfg = mla_cfg(8, 2, qr, 4, 3, 2, 3);
    Rng rng(2);
    MlaParams<float> p;
    mla_init(p, cfg, rng);
    std::size_t n = 0;
    std::vector<std::string> names;
    MlaParams<float>::visit(p, [&](const char* name, Tensor<float>& t) {
      n += t.size();
      names.emplace_back(name);
    });
    CHECK(mla_param_count(cfg) == n);
    const bool direct =
        std::find(names.begin(), names.end(), "self_attention.linear_q_proj.weight") != names.end();
    CHECK(direct == (qr == 0));
    CHECK(names.size() == (qr == 0 ? 5u : 7u));
  }
}
