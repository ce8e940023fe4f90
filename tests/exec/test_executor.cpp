// Specification of the EP-overlap executor: running the schedule plan changes nothing in the
// math. Oracles: the HybridModel (sequential, one microbatch, no ranks) for EP = 1; the
// sequential plan for the combined-1F1B plan; delayed wgrad off for on; the flattened pattern
// for the grouped one. All comparisons are bitwise (memcmp of float32 buffers).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cstdio>
#include <cstring>

#include "ht/engine/exec/executor.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/rng.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"

namespace {

using namespace ht;
using engine::Batch;
using engine::ModelConfig;
using engine::exec::Executor;

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden = 16;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.ffn_hidden = 24;
  c.num_experts = 4;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 12;
  c.mamba_state_dim = 4;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 2;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 2;
  c.gdn_head_dim_qk = 4;
  c.gdn_head_dim_v = 4;
  c.mla_q_lora_rank = 8;
  c.mla_kv_lora_rank = 8;
  c.mla_qk_head_dim = 4;
  c.mla_qk_pos_head_dim = 2;
  c.mla_v_head_dim = 4;
  return c;
}

Batch make_batch(std::uint64_t seed, int b, int t, int vocab) {
  engine::Rng rng(seed);
  Batch batch{engine::Tensor<int>({b, t}), engine::Tensor<int>({b, t})};
  for (auto& v : batch.tokens.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
  for (auto& v : batch.targets.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
  return batch;
}

std::vector<std::vector<Batch>> make_batches(int ranks, int mbs, int b, int t, int vocab, std::uint64_t seed) {
  std::vector<std::vector<Batch>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    for (int m = 0; m < mbs; ++m) out[static_cast<std::size_t>(r)].push_back(make_batch(seed * 131 + static_cast<std::uint64_t>(r * 17 + m), b, t, vocab));
  return out;
}

schedule::Plan plan_for(const patterns::ParsedPattern& p, const ModelConfig& cfg, int ep, int mbs, bool overlap,
                        bool delay, int b, int t) {
  schedule::ParallelConfig pc;
  pc.ep = ep;
  pc.dp = ep;
  pc.microbatches = mbs;
  schedule::ScheduleOptions so;
  so.overlap = overlap;
  so.delay_wgrad = delay;
  return schedule::build_plan(p, engine::exec::schedule_dims(cfg, b, t), pc, so);
}

bool same_bits(const engine::Tensor<float>& a, const engine::Tensor<float>& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.size() * sizeof(float)) == 0;
}

// Every gradient of every rank, by canonical name.
std::map<std::string, engine::Tensor<float>> grads_of(Executor& ex) {
  std::map<std::string, engine::Tensor<float>> out;
  for (int r = 0; r < ex.ranks(); ++r)
    for (auto& p : ex.parameters(r)) out["r" + std::to_string(r) + ":" + p.canonical] = *p.grad;
  return out;
}

// Names of the gradients that differ (or exist on one side only); empty when bitwise equal.
std::vector<std::string> differing(const std::map<std::string, engine::Tensor<float>>& a,
                                   const std::map<std::string, engine::Tensor<float>>& b) {
  std::vector<std::string> diff;
  for (auto& [k, v] : a)
    if (!b.count(k) || !same_bits(v, b.at(k))) diff.push_back(k);
  for (auto& [k, v] : b)
    if (!a.count(k)) diff.push_back(k);
  return diff;
}
using Names = std::vector<std::string>;

}  // namespace

TEST_CASE("executor with one rank and one microbatch equals the HybridModel bit for bit", "[exec]") {
  const auto cfg = tiny();
  for (const char* text : {"M*E", "[M*E]-", "G[W-][+E]", "+E"}) {
    CAPTURE(text);
    const auto p = patterns::parse(text);
    Executor ex(p, cfg, 7, plan_for(p, cfg, 1, 1, false, false, 2, 8));
    auto batches = make_batches(1, 1, 2, 8, cfg.vocab_size, 3);
    auto res = ex.step(batches);

    engine::HybridModel<float> model(p, cfg, 7);
    auto loss = model.forward(batches[0][0]);
    model.backward();
    CHECK(res.total == loss.total);
    auto params = ex.parameters(0);
    auto ref = model.parameters();
    REQUIRE(params.size() == ref.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(ref[i].canonical);
      REQUIRE(params[i].canonical == ref[i].canonical);
      CHECK(same_bits(*params[i].value, *ref[i].value));
      CHECK(same_bits(*params[i].grad, *ref[i].grad));
    }
  }
}

TEST_CASE("combined 1F1B equals the sequential schedule bit for bit, with and without delayed wgrad", "[exec]") {
  const auto cfg = tiny();
  for (const char* text : {"[M*E][*E]", "M[*-]E[GE]"}) {
    CAPTURE(text);
    const auto p = patterns::parse(text);
    auto batches = make_batches(2, 4, 2, 8, cfg.vocab_size, 11);
    Executor seq(p, cfg, 5, plan_for(p, cfg, 2, 4, false, false, 2, 8));
    Executor ovl(p, cfg, 5, plan_for(p, cfg, 2, 4, true, false, 2, 8));
    Executor dly(p, cfg, 5, plan_for(p, cfg, 2, 4, true, true, 2, 8));
    auto a = seq.step(batches);
    auto b = ovl.step(batches);
    auto c = dly.step(batches);
    CHECK(a.loss == b.loss);
    CHECK(a.loss == c.loss);
    const auto ga = grads_of(seq);
    CHECK(differing(ga, grads_of(ovl)) == Names{});
    CHECK(differing(ga, grads_of(dly)) == Names{});
  }
}

TEST_CASE("grouped and flattened patterns give the same losses and gradients under overlap", "[exec]") {
  const auto cfg = tiny();
  const auto grouped = patterns::parse("[M*E][G-][*E]");
  const auto flat = patterns::flatten(grouped);
  auto batches = make_batches(2, 3, 2, 8, cfg.vocab_size, 23);
  Executor g(grouped, cfg, 9, plan_for(grouped, cfg, 2, 3, true, true, 2, 8));
  Executor f(flat, cfg, 9, plan_for(flat, cfg, 2, 3, true, true, 2, 8));
  auto a = g.step(batches);
  auto b = f.step(batches);
  CHECK(a.loss == b.loss);
  CHECK(differing(grads_of(g), grads_of(f)) == Names{});
}

TEST_CASE("non-expert gradients are identical on every EP rank after the all-reduce", "[exec]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]-E");
  Executor ex(p, cfg, 1, plan_for(p, cfg, 4, 2, true, true, 1, 8));
  ex.step(make_batches(4, 2, 1, 8, cfg.vocab_size, 5));
  auto r0 = ex.parameters(0);
  for (int r = 1; r < 4; ++r) {
    auto rr = ex.parameters(r);
    for (std::size_t i = 0; i < r0.size(); ++i) {
      CAPTURE(r, r0[i].canonical);
      if (r0[i].canonical.find("local_experts") == std::string::npos) CHECK(same_bits(*r0[i].grad, *rr[i].grad));
    }
  }
}

TEST_CASE("a dropped residual gradient in the merge is caught by the equivalence check", "[exec]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]E");
  auto batches = make_batches(1, 1, 2, 8, cfg.vocab_size, 2);
  engine::exec::ExecutorOptions broken;
  broken.test_drop_residual_grad = true;
  Executor ex(p, cfg, 4, plan_for(p, cfg, 1, 1, false, false, 2, 8), broken);
  ex.step(batches);
  engine::HybridModel<float> model(p, cfg, 4);
  model.forward(batches[0][0]);
  model.backward();
  auto params = ex.parameters(0);
  auto ref = model.parameters();
  int differing = 0;
  for (std::size_t i = 0; i < params.size(); ++i) differing += same_bits(*params[i].grad, *ref[i].grad) ? 0 : 1;
  CHECK(differing > 0);
}

TEST_CASE("the executor rejects plans it cannot run with a clear error", "[exec]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]|[*E]");
  schedule::ParallelConfig pc;
  pc.pp = 2;
  pc.microbatches = 2;
  auto plan = schedule::build_plan(p, engine::exec::schedule_dims(cfg, 1, 8), pc, {});
  CHECK_THROWS_WITH(Executor(p, cfg, 1, plan), Catch::Contains("pipeline parallelism"));
  const auto q = patterns::parse("*E");
  CHECK_THROWS_WITH(Executor(q, cfg, 1, plan_for(patterns::parse("*-"), cfg, 1, 1, false, false, 1, 8)),
                    Catch::Contains("was built for pattern"));
}

TEST_CASE("overlap never changes the math for generated patterns, EP sizes and microbatch counts", "[exec][property]") {
  const auto cfg = tiny();
  rc::prop("combined 1F1B with delayed wgrad == sequential", [&] {
    const auto body = *rc::gen::container<std::vector<int>>(*rc::gen::inRange(1, 4), rc::gen::inRange(0, 6));
    static const char* items[] = {"[*E]", "[ME]", "M", "[G-]", "E", "[*-]"};
    std::string text;
    for (int i : body) text += items[i];
    const int ep = *rc::gen::element(1, 2, 4);
    const int mbs = *rc::gen::inRange(1, 4);
    const auto p = patterns::parse(text);
    auto batches = make_batches(ep, mbs, 1, 6, cfg.vocab_size, *rc::gen::inRange<std::uint64_t>(0, 1000));
    const bool moe = text.find('E') != std::string::npos;
    Executor a(p, cfg, 3, plan_for(p, cfg, ep, mbs, false, false, 1, 6));
    auto ra = a.step(batches);
    if (ep > 1 && moe) {
      Executor b(p, cfg, 3, plan_for(p, cfg, ep, mbs, true, true, 1, 6));
      auto rb = b.step(batches);
      RC_ASSERT(ra.loss == rb.loss);
      RC_ASSERT(differing(grads_of(a), grads_of(b)) == Names{});
    }
    Executor f(patterns::flatten(p), cfg, 3, plan_for(patterns::flatten(p), cfg, ep, mbs, false, false, 1, 6));
    auto rf = f.step(batches);
    RC_ASSERT(ra.loss == rf.loss);
    RC_ASSERT(differing(grads_of(a), grads_of(f)) == Names{});
  });
}

TEST_CASE("a checkpoint of the overlapped grouped run resumes the sequential flattened run identically", "[exec]") {
  const auto cfg = tiny();
  const auto grouped = patterns::parse("[M*E][G-]E");
  const auto flat = patterns::flatten(grouped);
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  Executor a(grouped, cfg, 12, plan_for(grouped, cfg, 2, 2, true, true, 1, 8));
  auto batches = [&](int step) { return make_batches(2, 2, 1, 8, cfg.vocab_size, 100 + static_cast<std::uint64_t>(step)); };
  for (int s = 0; s < 2; ++s) {
    a.zero_grad();
    a.step(batches(s));
    a.optimizer_step(opt);
  }
  const std::string path = "exec_resume_test.safetensors";
  a.save(path);
  a.zero_grad();
  a.step(batches(2));
  a.optimizer_step(opt);

  Executor b(flat, cfg, 999, plan_for(flat, cfg, 2, 2, false, false, 1, 8));  // other seed: all comes from the file
  b.load(path);
  CHECK(b.optimizer_steps() == 2);
  b.zero_grad();
  b.step(batches(2));
  b.optimizer_step(opt);
  for (int r = 0; r < 2; ++r) {
    auto pa = a.parameters(r), pb = b.parameters(r);
    REQUIRE(pa.size() == pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      if (!a.owns(r, pa[i].canonical)) continue;
      CAPTURE(r, pa[i].canonical);
      CHECK(same_bits(*pa[i].value, *pb[i].value));
    }
  }
  std::remove(path.c_str());
}

TEST_CASE("loading a checkpoint of another model is refused and changes nothing", "[exec]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]");
  Executor a(p, cfg, 1, plan_for(p, cfg, 1, 1, false, false, 1, 8));
  const std::string path = "exec_bad_ckpt_test.safetensors";
  a.save(path);
  const auto q = patterns::parse("[*E]-");
  Executor b(q, cfg, 2, plan_for(q, cfg, 1, 1, false, false, 1, 8));
  auto before = *b.parameters(0)[0].value;
  CHECK_THROWS_WITH(b.load(path), Catch::Contains("missing parameter"));
  CHECK(same_bits(before, *b.parameters(0)[0].value));
  std::remove(path.c_str());
}
