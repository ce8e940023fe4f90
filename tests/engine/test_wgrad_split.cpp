// Every layer backward split into its input-gradient part and its weight-gradient GEMMs
// (layers/wgrad.hpp): given a sink, the backward computes the input gradient and the
// recurrence-born parameter gradients (norm weights, conv, dt_bias, A_log, D) exactly as the fused
// backward does, leaves every linear map's weight gradient untouched, and hands the sink one GEMM
// per linear map; running the sink then gives the fused backward's weight gradients bit for bit.
// The lists below are the specification docs/engine.md repeats: what W computes per layer.
#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <string>

#include "fd.hpp"
#include "ht/engine/cuda/device_checks.hpp"
#include "ht/engine/exec/weight_steps.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/gdn.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/layers/swiglu.hpp"

using namespace ht::engine;
using ht::engine::test::random_tensor;
using TF = Tensor<float>;

namespace {

ModelConfig model() { return cuda::model_check_config(); }  // every mixer's dims

bool same_bits(const TF& a, const TF& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.size() * sizeof(float)) == 0;
}
bool all_zero(const TF& t) {
  for (float v : t.data)
    if (v != 0.0f) return false;
  return true;
}

// P: the layer's params; init(p, cfg, rng), fwd(cfg, p, x, out, cache), bwd(cfg, p, cache, x,
// dout, dx, grads, sink). `deferred`: the parameters whose gradient is a linear map's weight GEMM.
template <class P, class C, class Init, class Fwd, class Bwd>
void check_split(Init init, Fwd fwd, Bwd bwd, const std::set<std::string>& deferred) {
  const ModelConfig cfg = model();
  Rng rng(17);
  P p;
  init(p, cfg, rng);
  const TF x = random_tensor<float>({2, 5, cfg.hidden}, rng), dout = random_tensor<float>({2, 5, cfg.hidden}, rng);
  C cache;
  TF out;
  fwd(cfg, p, x, out, cache);
  P fused = p, split = p;
  P::visit(fused, [](const auto&, TF& t) { t.zero(); });
  P::visit(split, [](const auto&, TF& t) { t.zero(); });
  TF dx_fused(x.shape), dx_split(x.shape);
  bwd(cfg, p, cache, x, dout, dx_fused, fused, nullptr);
  exec::DeferredGemms<exec::CpuMemory, float> sink;
  bwd(cfg, p, cache, x, dout, dx_split, split, &sink);
  CHECK(same_bits(dx_fused, dx_split));
  CHECK(sink.pending() == deferred.size());  // one GEMM per linear map
  std::vector<std::pair<std::string, TF*>> a, b;
  P::visit(fused, [&](const auto& name, TF& t) { a.emplace_back(std::string(name), &t); });
  P::visit(split, [&](const auto& name, TF& t) { b.emplace_back(std::string(name), &t); });
  std::set<std::string> seen;
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK_FALSE(all_zero(*a[i].second));  // every parameter has a gradient to move or keep
    if (deferred.count(a[i].first)) {
      seen.insert(a[i].first);
      CHECK(all_zero(*b[i].second));  // left to the W node
    } else {
      CHECK(same_bits(*a[i].second, *b[i].second));  // computed in the backward
    }
  }
  CHECK(seen == deferred);
  sink.run();
  CHECK(sink.pending() == 0);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first << " after the W step");
    CHECK(same_bits(*a[i].second, *b[i].second));
  }
}

}  // namespace

TEST_CASE("attention's W computes linear_qkv and linear_proj, the fused bits follow", "[engine][wgrad]") {
  check_split<AttentionParams<float>, AttentionCache<float>>(
      [](auto& p, const auto& cfg, auto& rng) { attention_init(p, cfg, rng); },
      [](const auto& cfg, const auto& p, const auto& x, auto& out, auto& cache) { attention_forward(cfg, p, x, out, cache, 0); },
      [](const auto& cfg, const auto& p, const auto& cache, const auto& x, const auto& dout, auto& dx, auto& g,
         WgradSink<float>* w) { attention_backward(cfg, p, cache, x, dout, dx, g, 0, w); },
      {"self_attention.linear_qkv.weight", "self_attention.linear_proj.weight"});
}

TEST_CASE("the MLP's W computes fc1 and fc2, the fused bits follow", "[engine][wgrad]") {
  check_split<MlpParams<float>, MlpCache<float>>([](auto& p, const auto& cfg, auto& rng) { mlp_init(p, cfg, rng); },
                                                 &mlp_forward<float>, &mlp_backward<float>,
                                                 {"mlp.linear_fc1.weight", "mlp.linear_fc2.weight"});
}

TEST_CASE("Mamba2's W computes in_proj and out_proj, while conv, dt_bias, A_log, D and the gated norm stay in the backward",
          "[engine][wgrad]") {
  check_split<Mamba2Params<float>, Mamba2Cache<float>>(
      [](auto& p, const auto& cfg, auto& rng) { mamba2_init(p, cfg, rng); }, &mamba2_forward<float>,
      &mamba2_backward<float>, {"mixer.in_proj.weight", "mixer.out_proj.weight"});
}

TEST_CASE("GDN's W computes in_proj and out_proj, while conv, dt_bias, A_log and out_norm stay in the backward",
          "[engine][wgrad]") {
  check_split<GdnParams<float>, GdnCache<float>>([](auto& p, const auto& cfg, auto& rng) { gdn_init(p, cfg, rng); },
                                                 &gdn_forward<float>, &gdn_backward<float>,
                                                 {"self_attention.in_proj.weight", "self_attention.out_proj.weight"});
}

TEST_CASE("MLA's W computes its five projections, while the latent norms stay in the backward", "[engine][wgrad]") {
  check_split<MlaParams<float>, MlaCache<float>>(
      [](auto& p, const auto& cfg, auto& rng) { mla_init(p, cfg, rng); }, &mla_forward<float>, &mla_backward<float>,
      {"self_attention.linear_q_down_proj.weight", "self_attention.linear_q_up_proj.weight",
       "self_attention.linear_kv_down_proj.weight", "self_attention.linear_kv_up_proj.weight",
       "self_attention.linear_proj.weight"});
}
