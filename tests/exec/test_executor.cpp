// Specification of the EP-overlap executor: running the schedule plan changes nothing in the
// math. Oracles: the HybridModel (sequential, one microbatch, no ranks) for EP = 1; the
// sequential plan for the combined-1F1B plan; delayed wgrad off for on; the flattened pattern
// for the grouped one; the single-stage run for pipeline-parallel runs (PP, VPP, PP x EP). All
// comparisons are bitwise (memcmp of float32 buffers).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>

#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/engine/memory_estimate.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/error.hpp"

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

// Pipeline layout of one run: pp stages, vpp virtual stages (0 = not set), ep = dp ranks.
struct Layout {
  int pp = 1, vpp = 0, ep = 1, mbs = 1;
  bool overlap = false, delay = false;
};

schedule::Plan pipeline_plan(const patterns::ParsedPattern& p, const ModelConfig& cfg, Layout l, int b, int t) {
  schedule::ParallelConfig pc;
  pc.pp = l.pp;
  pc.vpp = l.vpp;
  pc.ep = l.ep;
  pc.dp = l.ep;
  pc.microbatches = l.mbs;
  schedule::ScheduleOptions so;
  so.overlap = l.overlap;
  so.delay_wgrad = l.delay;
  return schedule::build_plan(p, engine::exec::schedule_dims(cfg, b, t), pc, so);
}

schedule::Plan plan_for(const patterns::ParsedPattern& p, const ModelConfig& cfg, int ep, int mbs, bool overlap,
                        bool delay, int b, int t) {
  return pipeline_plan(p, cfg, {1, 0, ep, mbs, overlap, delay}, b, t);
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

std::string without_pipes(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), '|'), text.end());
  return text;
}

// Gradients (or values) by (DP rank, canonical name), over every stage: the same keys for any
// pipeline split of the same model and DP size.
std::map<std::string, engine::Tensor<float>> by_dp_rank(Executor& ex, bool grads, bool owned_only = false) {
  std::map<std::string, engine::Tensor<float>> out;
  for (int r = 0; r < ex.ranks(); ++r)
    for (auto& p : ex.parameters(r)) {
      if (owned_only && !ex.owns(r, p.canonical)) continue;
      const auto key = "d" + std::to_string(r % ex.data_ranks()) + ":" + p.canonical;
      if (!out.emplace(key, grads ? *p.grad : *p.value).second)
        throw std::logic_error(key + " is held by two stages");
    }
  return out;
}

bool same_double(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The executor's parameters (one rank) against HybridModel's: same canonical names and keys, in
// the same order, and the same bits in what is asked for.
template <class P, class Q>
void expect_same_params(const P& params, const Q& ref, bool values, bool grads) {
  REQUIRE(params.size() == ref.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(ref[i].canonical);
    REQUIRE(params[i].canonical == ref[i].canonical);
    CHECK(params[i].key == ref[i].key);
    if (values) CHECK(same_bits(*params[i].value, *ref[i].value));
    if (grads) CHECK(same_bits(*params[i].grad, *ref[i].grad));
  }
}

// Runs `steps` optimizer steps of the pipelined and the single-stage model on the same data and
// checks losses, every gradient, the clipping norm and every parameter bit for bit.
void expect_pipeline_equal(const std::string& piped, Layout l, int steps, std::uint64_t seed) {
  const auto cfg = tiny();
  const auto p = patterns::parse(piped);
  const auto ref = patterns::parse(without_pipes(piped));
  Executor a(p, cfg, seed, pipeline_plan(p, cfg, l, 1, 6));
  Executor b(ref, cfg, seed, pipeline_plan(ref, cfg, {1, 0, l.ep, l.mbs, false, false}, 1, 6));
  REQUIRE(a.ranks() == l.pp * l.ep);
  REQUIRE(a.data_ranks() == b.data_ranks());
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  opt.clip_norm = 0.05f;  // small enough to clip: the global norm's summation order matters
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    const auto batches = make_batches(l.ep, l.mbs, 1, 6, cfg.vocab_size, seed * 10 + static_cast<std::uint64_t>(s));
    a.zero_grad();
    b.zero_grad();
    const auto ra = a.step(batches);
    const auto rb = b.step(batches);
    CHECK(ra.loss == rb.loss);
    CHECK(same_double(ra.total, rb.total));
    CHECK(differing(by_dp_rank(a, true), by_dp_rank(b, true)) == Names{});
    CHECK(same_double(a.optimizer_step(opt), b.optimizer_step(opt)));
    CHECK(differing(by_dp_rank(a, false), by_dp_rank(b, false)) == Names{});
  }
}

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
    expect_same_params(ex.parameters(0), model.parameters(), true, true);
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
  const auto mtp = patterns::parse("[*E]|[*E]/*E");
  CHECK_THROWS_WITH(Executor(mtp, cfg, 1, pipeline_plan(mtp, cfg, {2, 0, 1, 2, false, false}, 1, 8)),
                    Catch::Contains("MTP depths") && Catch::Contains("pp 2") && !Catch::Contains("\n"));
  // Hybrid MTP never runs overlapped (rule O3): the builder refuses, and a plan built with the
  // 7-27 behaviour (reject_hybrid_mtp off) is refused by the executor.
  const auto hybrid_mtp = patterns::parse("[*E]E/*E");
  schedule::ParallelConfig pc_mtp;
  pc_mtp.ep = 2;
  pc_mtp.dp = 2;
  pc_mtp.microbatches = 2;
  schedule::ScheduleOptions overlapped;
  overlapped.overlap = true;
  CHECK_THROWS_AS(schedule::build_plan(hybrid_mtp, engine::exec::schedule_dims(cfg, 1, 8), pc_mtp, overlapped),
                  schedule::ScheduleError);
  overlapped.reject_hybrid_mtp = false;
  CHECK_THROWS_WITH(Executor(hybrid_mtp, cfg, 1, schedule::build_plan(hybrid_mtp, engine::exec::schedule_dims(cfg, 1, 8),
                                                                      pc_mtp, overlapped)),
                    Catch::Contains("O3") && Catch::Contains("overlap") && !Catch::Contains("\n"));
  const auto other_mtp = patterns::parse("*E/*E/*E");
  CHECK_THROWS_WITH(Executor(patterns::parse("*E/*E"), cfg, 1, plan_for(other_mtp, cfg, 1, 1, false, false, 1, 8)),
                    Catch::Contains("was built for pattern"));
  const auto q = patterns::parse("*E");
  CHECK_THROWS_WITH(Executor(q, cfg, 1, plan_for(patterns::parse("*-"), cfg, 1, 1, false, false, 1, 8)),
                    Catch::Contains("was built for pattern"));
  schedule::ParallelConfig pc;
  pc.dp = 2;
  pc.pp = 2;
  pc.microbatches = 2;
  const auto p = patterns::parse("[*E]|-");
  auto odd = schedule::build_plan(p, engine::exec::schedule_dims(cfg, 1, 8), pc, {});
  odd.ep = 4;  // as a hand-edited plan file could say
  CHECK_THROWS_WITH(Executor(p, cfg, 1, odd), Catch::Contains("ep 4 must divide dp 2"));
}

// Oracle: the EP = DP executor (itself held to HybridModel above). With DP > EP each group of EP
// consecutive DP ranks holds the experts once; an expert's gradient is the sum of its replicas'
// (the EDP all-reduce) where EP = DP sums the same rows in one GEMM: equal within the
// reassociation bound, and the replicas equal each other bit for bit. The clipping norm counts
// each expert once (a replica counted twice would change it by far more than the bound).
TEST_CASE("DP > EP: expert replicas sum their gradients and equal EP = DP within the reassociation bound", "[exec]") {
  const auto cfg = tiny();
  const int dp = 4, mbs = 2, b = 1, t = 8;
  for (const char* text : {"[*E]-E", "M*-E"})
    for (int ep : {1, 2}) {
      CAPTURE(text, ep);
      const auto p = patterns::parse(text);
      const auto batches = make_batches(dp, mbs, b, t, cfg.vocab_size, 17);
      Executor a(p, cfg, 3, engine::exec::ep_plan(p, cfg, b, t, ep, mbs, ep == 2, ep == 2, dp));
      Executor c(p, cfg, 3, engine::exec::ep_plan(p, cfg, b, t, dp, mbs, false, false));
      const auto ra = a.step(batches), rc = c.step(batches);
      const double bound = static_cast<double>(dp) * mbs * b * t * std::ldexp(1.0, -24);
      const auto d = engine::exec::compare_owned(engine::exec::owned(a), engine::exec::owned(c), true);
      CHECK(d.missing.empty());
      CHECK(d.max_ref > 0);
      CHECK(d.max_abs <= bound * d.max_ref);
      CHECK(std::fabs(ra.total - rc.total) <= bound * std::fabs(rc.total));
      for (int r = ep; r < dp; ++r) {  // rank r holds rank r - ep's experts
        auto mine = a.parameters(r), first = a.parameters(r - ep);
        for (std::size_t i = 0; i < mine.size(); ++i)
          if (a.owns(r, mine[i].canonical)) CHECK(same_bits(*mine[i].grad, *first[i].grad));
      }
      engine::AdamWConfig oc;
      const double na = a.optimizer_step(oc), nc = c.optimizer_step(oc);
      CHECK(std::fabs(na - nc) <= bound * nc);
    }
}

TEST_CASE("a plan whose ranks wait for each other is refused before any rank runs", "[exec]") {
  // Rank 1 issues two all-to-alls in the other order. The walk every rank shares (plan_walk.hpp)
  // refuses the plan in one line before a stream runs: without it each rank's host thread would
  // issue its own order and the transport would wait for the deadlock timeout.
  const auto cfg = tiny();
  const auto p = patterns::parse("*E");
  auto plan = plan_for(p, cfg, 2, 2, false, false, 1, 8);
  auto& issue = plan.ranks.at(1).issue;
  std::vector<std::size_t> comm;
  for (std::size_t i = 0; i < issue.size(); ++i)
    if (plan.node(issue[i]).collective >= 0 && plan.node(issue[i]).slot != schedule::Slot::GradAllReduce) comm.push_back(i);
  REQUIRE(comm.size() >= 2);
  std::swap(issue[comm[0]], issue[comm[1]]);
  Executor ex(p, cfg, 1, plan);
  CHECK_THROWS_WITH(ex.step(make_batches(2, 2, 1, 8, cfg.vocab_size, 3)),
                    Catch::Contains("executor: deadlock") && !Catch::Contains("\n"));
  // Nothing ran: no gradient was written.
  for (const auto& w : ex.parameters(0))
    for (float g : w.grad->data) CHECK(g == 0.0f);
}

TEST_CASE("overlap never changes the math for generated patterns, EP sizes and microbatch counts", "[exec][property]") {
  const auto cfg = tiny();
  rc::prop("combined 1F1B with delayed wgrad == sequential", [&] {
    const auto body = *rc::gen::container<std::vector<int>>(*rc::gen::inRange(1, 4), rc::gen::inRange(0, 6));
    static const char* items[] = {"[*E]", "[ME]", "M", "[G-]", "E", "[*-]"};
    std::string text;
    for (int i : body) text += items[i];
    // MTP depths join the sequential and flattened runs; hybrid MTP never overlaps (rule O3).
    const std::string mtp = *rc::gen::element<std::string>("", "", "/*E", "/E/E", "/M-");
    text += mtp;
    const int ep = *rc::gen::element(1, 2, 4);
    const int mbs = *rc::gen::inRange(1, 4);
    const auto p = patterns::parse(text);
    auto batches = make_batches(ep, mbs, 1, 6, cfg.vocab_size, *rc::gen::inRange<std::uint64_t>(0, 1000));
    const bool moe = text.find('E') != std::string::npos;
    Executor a(p, cfg, 3, plan_for(p, cfg, ep, mbs, false, false, 1, 6));
    auto ra = a.step(batches);
    if (ep > 1 && moe && mtp.empty()) {
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

TEST_CASE("pipeline stages equal the single-stage run bit for bit over optimizer steps", "[exec][pp]") {
  struct Case {
    const char* pattern;
    Layout layout;
  };
  const Case cases[] = {
      {"[M*E]|[*E]-", {2, 0, 1, 3, false, false}},          // 1F1B, two stages
      {"[*E][*E]", {2, 0, 1, 2, false, false}},             // legacy split without pipes
      {"[M*E]|-|[*E]|G", {2, 2, 1, 4, false, false}},       // interleaved (VPP 2), sequential nodes
      {"M*|E|", {3, 0, 2, 4, false, false}},                // PP 3 x EP 2, an empty last stage
      {"[*E]|[ME]", {2, 1, 2, 4, true, false}},             // PP x EP, overlapped (interleaved 1F1B)
      {"[*E]|M|[GE]|-", {2, 2, 2, 2, true, true}},          // VPP 2 x EP 2, overlap, delayed wgrad
      {"|[*E]E|[M-]|[*E]", {2, 2, 2, 4, true, true}},       // empty first chunk: stage 0 only embeds
  };
  for (const auto& c : cases) {
    CAPTURE(c.pattern, c.layout.pp, c.layout.vpp, c.layout.ep, c.layout.mbs, c.layout.overlap);
    expect_pipeline_equal(c.pattern, c.layout, 2, 17);
  }
}

TEST_CASE("a dropped residual gradient on a pipeline stage is caught by the PP = 1 comparison", "[exec][pp]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]|[ME]");
  const auto ref = patterns::parse("[*E][ME]");
  const auto batches = make_batches(2, 2, 1, 6, cfg.vocab_size, 4);
  engine::exec::ExecutorOptions broken;
  broken.test_drop_residual_grad = true;
  Executor a(p, cfg, 2, pipeline_plan(p, cfg, {2, 1, 2, 2, true, true}, 1, 6), broken);
  Executor b(ref, cfg, 2, plan_for(ref, cfg, 2, 2, false, false, 1, 6));
  a.step(batches);
  b.step(batches);
  // Stage 1's merge is wrong: its gradient reaches stage 0 through the pipeline, so both stages
  // (and the embedding) differ from the single-stage run.
  const auto diff = differing(by_dp_rank(a, true), by_dp_rank(b, true));
  CHECK(std::count(diff.begin(), diff.end(), "d0:embedding.word_embeddings.weight") == 1);
  CHECK(diff.size() > 10);
}

TEST_CASE("the measured timeline of a pipelined step has every plan node, p2p on the comm stream", "[exec][pp]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]|-|E|M");
  const auto plan = pipeline_plan(p, cfg, {2, 2, 2, 2, true, true}, 1, 6);
  Executor ex(p, cfg, 3, plan);
  const auto res = ex.step(make_batches(2, 2, 1, 6, cfg.vocab_size, 9));
  CHECK(res.timeline.spans.size() == plan.nodes.size());
  CHECK(res.timeline.metadata.at("pp") == "2");
  CHECK(res.timeline.metadata.at("vpp") == "2");
  int sends = 0, recvs = 0;
  for (const auto& span : res.timeline.spans) {
    if (span.category != "pipe_send" && span.category != "pipe_recv") continue;
    (span.category == "pipe_send" ? sends : recvs) += 1;
    CHECK(span.stream == 1);  // the comm stream
  }
  CHECK(sends > 0);
  CHECK(sends == recvs);
}

TEST_CASE("a pipeline rank holds only its stage's parameters", "[exec][pp]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]|-|E|M");  // pp 2, vpp 2: rank stage 0 holds [*E] and E
  Executor ex(p, cfg, 3, pipeline_plan(p, cfg, {2, 2, 2, 2, true, false}, 1, 8));
  REQUIRE(ex.ranks() == 4);
  CHECK(ex.pipeline_stage(1) == 0);
  CHECK(ex.pipeline_stage(2) == 1);
  auto names = [&](int r) {
    std::set<std::string> out;
    for (auto& q : ex.parameters(r)) out.insert(q.canonical);
    return out;
  };
  const auto s0 = names(0), s1 = names(2);
  CHECK(names(1) == s0);
  CHECK(s0.count("embedding.word_embeddings.weight") == 1);
  CHECK(s0.count("output_layer.weight") == 0);
  CHECK(s1.count("embedding.word_embeddings.weight") == 0);
  CHECK(s1.count("output_layer.weight") == 1);
  CHECK(s1.count("decoder.final_norm.weight") == 1);
  // physical layers: [*E] = 0, 1; '-' = 2; E = 3; M = 4
  for (const auto& n : s0) CHECK((n.rfind("layers.2.", 0) != 0 && n.rfind("layers.4.", 0) != 0));
  for (const auto& n : s1) CHECK((n.rfind("layers.0.", 0) != 0 && n.rfind("layers.1.", 0) != 0 && n.rfind("layers.3.", 0) != 0));
  CHECK(ex.owns(0, "layers.3.mlp.experts.local_experts.1.linear_fc1.weight"));
  CHECK(!ex.owns(1, "layers.3.mlp.experts.local_experts.1.linear_fc1.weight"));
  CHECK(ex.owns(1, "layers.3.mlp.experts.local_experts.2.linear_fc1.weight"));
  CHECK(!ex.owns(2, "layers.3.mlp.experts.local_experts.0.linear_fc1.weight"));
  CHECK(!ex.owns(0, "output_layer.weight"));
  CHECK(ex.owns(3, "output_layer.weight"));
}

TEST_CASE("a checkpoint of the interleaved PP x EP run resumes the single-stage run identically, and back", "[exec][pp]") {
  const auto cfg = tiny();
  const auto piped = patterns::parse("[M*E]|-|[*E]|G");
  const auto flat = patterns::flatten(patterns::parse(without_pipes(piped.text)));
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  auto batches = [&](int step) { return make_batches(2, 2, 1, 8, cfg.vocab_size, 300 + static_cast<std::uint64_t>(step)); };
  Executor a(piped, cfg, 21, pipeline_plan(piped, cfg, {2, 2, 2, 2, true, true}, 1, 8));
  Executor b(flat, cfg, 5, pipeline_plan(flat, cfg, {1, 0, 2, 2, false, false}, 1, 8));
  Executor c(piped, cfg, 6, pipeline_plan(piped, cfg, {2, 2, 2, 2, false, false}, 1, 8));
  for (int s = 0; s < 2; ++s) {
    a.zero_grad();
    a.step(batches(s));
    a.optimizer_step(opt);
  }
  const std::string path = "exec_pp_resume_test.safetensors", path2 = "exec_pp_resume_test2.safetensors";
  a.save(path);
  b.load(path);
  b.save(path2);
  c.load(path2);  // back onto two stages, without the overlap
  CHECK(b.optimizer_steps() == 2);
  CHECK(c.optimizer_steps() == 2);
  for (Executor* e : {&a, &b, &c}) {
    e->zero_grad();
    e->step(batches(2));
    e->optimizer_step(opt);
  }
  // Canonical names do not depend on grouping or stages: all three hold the same bits (experts
  // compared on their owners; other ranks' copies are never read).
  const auto va = by_dp_rank(a, false, true);
  CHECK(va.size() > 20);
  CHECK(differing(va, by_dp_rank(b, false, true)) == Names{});
  CHECK(differing(va, by_dp_rank(c, false, true)) == Names{});
  std::remove(path.c_str());
  std::remove(path2.c_str());
}

TEST_CASE("pipeline splits never change the math for generated patterns, stages and schedules", "[exec][pp][property]") {
  const auto cfg = tiny();
  rc::prop("PP = k (with or without VPP, overlap) == PP = 1, one step", [&] {
    static const char* items[] = {"[*E]", "[ME]", "M", "[G-]", "E", "[*-]"};
    const int pp = *rc::gen::inRange(2, 4);
    const int vpp = *rc::gen::element(0, 1, 2, 2);
    const int ep = *rc::gen::element(1, 2, 2);
    const bool want_overlap = *rc::gen::element(false, true, true);
    const bool delay = *rc::gen::arbitrary<bool>();
    const int mbs = vpp > 0 ? pp * *rc::gen::inRange(1, 3) : *rc::gen::inRange(1, 5);
    std::string text;
    int count = 0;
    for (int s = 0; s < pp * std::max(vpp, 1); ++s) {
      if (s > 0) text += "|";
      for (int i : *rc::gen::container<std::vector<int>>(*rc::gen::inRange(0, 3), rc::gen::inRange(0, 6))) {
        text += items[i];
        ++count;
      }
    }
    if (count == 0) text += "M";
    // The overlap needs EP > 1, virtual stages with PP > 1, and something to overlap.
    const bool overlap = want_overlap && ep > 1 && vpp > 0 && text.find('E') != std::string::npos;
    RC_TAG(pp, vpp, ep, overlap);
    const auto p = patterns::parse(text);
    const auto ref = patterns::parse(without_pipes(text));
    const auto batches = make_batches(ep, mbs, 1, 4, cfg.vocab_size, *rc::gen::inRange<std::uint64_t>(0, 1000));
    Executor a(p, cfg, 8, pipeline_plan(p, cfg, {pp, vpp, ep, mbs, overlap, overlap && delay}, 1, 4));
    Executor b(ref, cfg, 8, pipeline_plan(ref, cfg, {1, 0, ep, mbs, false, false}, 1, 4));
    const auto ra = a.step(batches);
    const auto rb = b.step(batches);
    RC_ASSERT(ra.loss == rb.loss);
    RC_ASSERT(differing(by_dp_rank(a, true), by_dp_rank(b, true)) == Names{});
  });
}

// ---- MTP depths (reference sections 1.2, 3.4, 5.1) ----

TEST_CASE("executor with one rank equals the HybridModel bit for bit on MTP patterns, over optimizer steps", "[exec][mtp]") {
  const auto cfg = tiny();
  for (const char* text : {"M*E/*E", "[M*E]-/*E/*E", "[*-]E/M-", "+E/+E", "G[W-]/E"}) {
    CAPTURE(text);
    const auto p = patterns::parse(text);
    Executor ex(p, cfg, 7, plan_for(p, cfg, 1, 1, false, false, 2, 8));
    engine::HybridModel<float> model(p, cfg, 7);
    engine::AdamWState<float> state;
    engine::AdamWConfig opt;
    opt.lr = 1e-2f;
    opt.clip_norm = 0.05f;  // clips: the global norm's summation order over MTP parameters matters
    for (int s = 0; s < 3; ++s) {
      CAPTURE(s);
      auto batches = make_batches(1, 1, 2, 8, cfg.vocab_size, 3 + static_cast<std::uint64_t>(s));
      ex.zero_grad();
      model.zero_grad();
      const auto res = ex.step(batches);
      const auto loss = model.forward(batches[0][0]);
      model.backward();
      REQUIRE(loss.mtp.size() == static_cast<std::size_t>(p.mtp_depths));
      CHECK(loss.mtp.front() > 0);
      CHECK(same_double(res.total, loss.total));
      auto ref = model.parameters();
      expect_same_params(ex.parameters(0), ref, false, true);
      const double norm = ex.optimizer_step(opt);
      CHECK(same_double(norm, engine::adamw_step(opt, state, ref)));
      expect_same_params(ex.parameters(0), model.parameters(), true, false);
    }
  }
}

TEST_CASE("grouped and flattened MTP patterns give the same bits on EP ranks", "[exec][mtp]") {
  const auto cfg = tiny();
  for (const char* text : {"[M*E][*E]/*E", "[*E]-/E/E"}) {
    CAPTURE(text);
    const auto grouped = patterns::parse(text);
    const auto flat = patterns::flatten(grouped);
    REQUIRE(flat.mtp_depths == grouped.mtp_depths);
    auto batches = make_batches(2, 3, 2, 8, cfg.vocab_size, 29);
    Executor g(grouped, cfg, 9, plan_for(grouped, cfg, 2, 3, false, false, 2, 8));
    Executor f(flat, cfg, 9, plan_for(flat, cfg, 2, 3, false, false, 2, 8));
    auto a = g.step(batches);
    auto b = f.step(batches);
    CHECK(a.loss == b.loss);
    CHECK(differing(grads_of(g), grads_of(f)) == Names{});
    // Every plan node ran, the depths' mtp_post among them.
    CHECK(a.timeline.spans.size() == g.plan().nodes.size());
    CHECK(std::count_if(a.timeline.spans.begin(), a.timeline.spans.end(),
                        [](const auto& span) { return span.category == "mtp_post"; }) ==
          2 * 3 * 2 * grouped.mtp_depths);  // ranks x microbatches x (F, B) x depths
    // The MTP depths' non-expert gradients are all-reduced like the decoder's.
    auto r0 = g.parameters(0), r1 = g.parameters(1);
    int mtp_params = 0;
    for (std::size_t i = 0; i < r0.size(); ++i) {
      if (r0[i].canonical.rfind("mtp.", 0) != 0) continue;
      ++mtp_params;
      CAPTURE(r0[i].canonical);
      if (r0[i].canonical.find("local_experts") == std::string::npos) CHECK(same_bits(*r0[i].grad, *r1[i].grad));
    }
    CHECK(mtp_params > 5);
  }
}

// EP = n over n ranks against EP = 1 running the same microbatches one after the other: same
// terms, other association (per-rank sums, then the all-reduce; each expert's GEMM over all
// sources at once), so the convention of the engine.ep_invariance property and `hybrid-twin
// verify` applies: within K u max|g| per element (K terms, u = 2^-24).
TEST_CASE("EP = n equals EP = 1 within the reassociation bound on MTP patterns", "[exec][mtp]") {
  const auto cfg = tiny();
  for (const char* text : {"M*E/*E", "[*E]E/E/E"}) {
    for (int ep : {2, 4}) {
      CAPTURE(text, ep);
      const auto p = patterns::parse(text);
      const int mbs = 2, b = 2, t = 8;
      const auto data = make_batches(ep, mbs, b, t, cfg.vocab_size, 41);
      std::vector<std::vector<Batch>> one(1);
      for (const auto& rank : data)
        for (const auto& mb : rank) one[0].push_back(mb);
      Executor a(p, cfg, 13, plan_for(p, cfg, ep, mbs, false, false, b, t));
      Executor c(p, cfg, 13, plan_for(p, cfg, 1, ep * mbs, false, false, b, t));
      const auto ra = a.step(data);
      const auto rc = c.step(one);
      std::map<std::string, engine::Tensor<float>> ref;
      for (auto& q : c.parameters(0)) ref[q.canonical] = *q.grad;
      double max_abs = 0, max_ref = 0;
      int compared = 0;
      for (int r = 0; r < a.ranks(); ++r)
        for (auto& q : a.parameters(r)) {
          if (!a.owns(r, q.canonical)) continue;
          REQUIRE(ref.count(q.canonical) == 1);
          const auto& g = ref.at(q.canonical);
          for (std::size_t i = 0; i < g.size(); ++i) {
            max_abs = std::max(max_abs, std::fabs(static_cast<double>((*q.grad)[i]) - g[i]));
            max_ref = std::max(max_ref, std::fabs(static_cast<double>(g[i])));
          }
          ++compared;
        }
      CHECK(compared >= static_cast<int>(ref.size()));
      const double k_terms = static_cast<double>(ep) * mbs * b * t;
      CHECK(max_abs <= k_terms * std::ldexp(1.0, -24) * max_ref);
      CHECK(std::fabs(ra.total - rc.total) <= k_terms * std::ldexp(1.0, -24) * std::fabs(rc.total));
    }
  }
}

TEST_CASE("an MTP checkpoint uses HybridModel's canonical names and resumes across grouping and EP ranks", "[exec][mtp]") {
  const auto cfg = tiny();
  const auto grouped = patterns::parse("[M*E]-/*E/*E");
  const auto flat = patterns::flatten(grouped);
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  auto batches = [&](int step) { return make_batches(2, 2, 1, 8, cfg.vocab_size, 500 + static_cast<std::uint64_t>(step)); };
  Executor a(grouped, cfg, 12, plan_for(grouped, cfg, 2, 2, false, false, 1, 8));
  for (int s = 0; s < 2; ++s) {
    a.zero_grad();
    a.step(batches(s));
    a.optimizer_step(opt);
  }
  const std::string path = "exec_mtp_resume_test.safetensors";
  a.save(path);
  std::set<std::string> saved, expected;
  for (const auto& [name, tensor] : engine::read_safetensors(path).tensors)
    if (name.rfind("param/", 0) == 0) saved.insert(name.substr(6));
  engine::HybridModel<float> model(grouped, cfg, 1);
  for (auto& q : model.parameters()) expected.insert(q.canonical);
  CHECK(saved == expected);
  CHECK(saved.count("mtp.layers.1.mtp_model_layer.layers.1.mlp.experts.local_experts.3.linear_fc2.weight") == 1);
  CHECK(saved.count("mtp.layers.0.eh_proj.weight") == 1);

  Executor b(flat, cfg, 999, plan_for(flat, cfg, 2, 2, false, false, 1, 8));  // other seed: all comes from the file
  b.load(path);
  std::remove(path.c_str());
  CHECK(b.optimizer_steps() == 2);
  for (Executor* e : {&a, &b}) {
    e->zero_grad();
    e->step(batches(2));
    e->optimizer_step(opt);
  }
  const auto va = by_dp_rank(a, false, true);
  CHECK(differing(va, by_dp_rank(b, false, true)) == Names{});
}

TEST_CASE("a dropped MTP hidden-state gradient in the merge is caught by the HybridModel comparison", "[exec][mtp]") {
  const auto cfg = tiny();
  for (const char* text : {"M*E/*E", "*E/*E/*E"}) {
    for (bool drop_mtp : {true, false}) {
      CAPTURE(text, drop_mtp);
      const auto p = patterns::parse(text);
      auto batches = make_batches(1, 1, 2, 8, cfg.vocab_size, 2);
      engine::exec::ExecutorOptions broken;
      (drop_mtp ? broken.test_drop_mtp_grad : broken.test_drop_residual_grad) = true;
      Executor ex(p, cfg, 4, plan_for(p, cfg, 1, 1, false, false, 2, 8), broken);
      ex.step(batches);
      engine::HybridModel<float> model(p, cfg, 4);
      model.forward(batches[0][0]);
      model.backward();
      auto params = ex.parameters(0);
      auto ref = model.parameters();
      std::set<std::string> diff;
      for (std::size_t i = 0; i < params.size(); ++i)
        if (!same_bits(*params[i].grad, *ref[i].grad)) diff.insert(ref[i].canonical);
      CHECK(!diff.empty());
      // The dropped hnorm gradient reaches everything below the first depth: the decoder's
      // final norm and the embedding differ; the last depth's own head does not.
      if (drop_mtp) {
        CHECK(diff.count("decoder.final_norm.weight") == 1);
        CHECK(diff.count("embedding.word_embeddings.weight") == 1);
        CHECK(diff.count("mtp.layers." + std::to_string(p.mtp_depths - 1) + ".final_layernorm.weight") == 0);
      }
    }
  }
}

TEST_CASE("measured spans carry what the twin calibrates from: CPU time, expert rows, bytes per peer", "[exec][trace]") {
  const auto cfg = tiny();
  const auto p = patterns::parse("[*E]E");
  const int ep = 2, mbs = 2, b = 2, t = 8;
  Executor ex(p, cfg, 3, plan_for(p, cfg, ep, mbs, true, false, b, t));
  const auto res = ex.step(make_batches(ep, mbs, b, t, cfg.vocab_size, 5));
  CHECK(std::stoi(res.timeline.metadata.at("host.cores")) >= 1);
  const std::string priority = res.timeline.metadata.at("host.comm_priority");
  CHECK((priority == "realtime" || priority == "normal"));
  using Key = std::pair<std::string, std::string>;  // layer, microbatch
  std::map<Key, long> rows;
  std::map<std::tuple<std::string, std::string, int, int>, std::string> sent;  // slot, key, from, to
  for (const auto& s : res.timeline.spans) {
    CAPTURE(s.name);
    // A thread cannot use more CPU than the wall time it ran (clock granularity aside).
    const double cpu_us = std::stod(s.args.at("cpu_us"));
    CHECK(cpu_us >= 0);
    CHECK(cpu_us <= s.duration_s * 1e6 + 50);
    if (s.args.count("pre_cpu_us")) CHECK(std::stod(s.args.at("pre_cpu_us")) <= cpu_us);
    const Key key{s.args.at("layer"), s.args.at("microbatch")};
    if (s.category == "mlp" && s.args.at("phase") == "forward" && s.args.count("rows"))
      rows[key] += std::stol(s.args.at("rows"));
    if ((s.category == "dispatch" || s.category == "combine") && s.args.at("phase") == "forward") {
      const std::string& text = s.args.at("sent_bytes");
      for (std::size_t at = 0; at < text.size();) {
        const std::size_t end = std::min(text.find(';', at), text.size()), colon = text.find(':', at);
        sent[{s.category, key.first + "/" + key.second, s.device, std::stoi(text.substr(at, colon - at))}] =
            text.substr(colon + 1, end - colon - 1);
        at = end + 1;
      }
    }
  }
  // Dropless top-k routing: each (MoE layer, microbatch) processes every token of every rank k times.
  REQUIRE(rows.size() == 2 * mbs);
  for (const auto& [key, n] : rows) CHECK(n == static_cast<long>(ep) * b * t * cfg.moe_topk);
  // The combine sends each row back to where the dispatch took it from.
  REQUIRE(!sent.empty());
  for (const auto& [k, bytes] : sent) {
    const auto& [slot, key, from, to] = k;
    if (slot != "dispatch") continue;
    CAPTURE(key, from, to);
    CHECK(sent.at({"combine", key, to, from}) == bytes);
  }
}

// One memory model for train and simulate (engine/memory_estimate.hpp): the schedule's walk over
// the executor's own plan. Oracles: the tensors the executor and HybridModel actually hold (every
// parameter, counted by element), and the walk's microbatches in flight (a sequential schedule holds
// one microbatch's activations whatever their number; combined 1F1B one more).
TEST_CASE("the engine's memory estimate counts what the executor holds, by the plan's walk", "[exec][memory]") {
  const auto cfg = tiny();
  const int b = 2, t = 8;
  const auto held = [](Executor& ex) {
    double n = 0;
    for (int r = 0; r < ex.ranks(); ++r)
      for (auto& p : ex.parameters(r)) n += static_cast<double>(p.value->size());
    return n;
  };
  const auto estimate = [&](const patterns::ParsedPattern& p, Layout l) {
    schedule::ParallelConfig pc;
    pc.pp = l.pp, pc.vpp = l.vpp, pc.ep = l.ep, pc.dp = l.ep, pc.microbatches = l.mbs;
    const auto dims = engine::exec::schedule_dims(cfg, b, t);
    return engine::estimate_training_memory(p, dims, pc, pipeline_plan(p, cfg, l, b, t), true);
  };
  for (const char* text : {"[M*E][*E]", "[*E]|-|E|", "M[*-]E[GE]"}) {
    CAPTURE(text);
    const auto p = patterns::parse(text);
    const bool piped = std::string(text).find('|') != std::string::npos;
    const Layout l{piped ? 2 : 1, piped ? 2 : 0, 2, 4, false, false};  // '[*E]|-|E|': PP 2 x VPP 2
    Executor ex(p, cfg, 3, pipeline_plan(p, cfg, l, b, t));
    const auto e = estimate(p, l);
    // Every rank's stage, non-expert weights on both EP ranks, each expert on its owner only.
    CHECK(e.parameters == held(ex));
    CHECK(e.bytes == 16 * e.parameters + e.activations);
    Layout more = l;
    more.mbs = 8;
    CHECK(estimate(p, more).activations == e.activations);  // one microbatch in flight either way
  }
  const auto p = patterns::parse("[M*E][*E]");
  const auto seq = estimate(p, {1, 0, 2, 4, false, false}), ovl = estimate(p, {1, 0, 2, 4, true, false});
  CHECK(ovl.activations > seq.activations);  // combined 1F1B: the next microbatch's forward too
  CHECK(ovl.activations < 2 * seq.activations + 1e-9);
  // The one-rank trainer: HybridModel's own parameters.
  engine::HybridModel<float> model(p, cfg, 3);
  CHECK(engine::estimate_training_memory(p, cfg, b, t).parameters == static_cast<double>(model.num_parameters()));
}
