// Megatron's parallel grid in the plan (megatron-parallel.md 1-6): rank numbering and groups, the
// derived layout and its refusals, the even pipeline split with its accounting options, the
// TP/SP and CP collectives around each block, DDP buckets, recomputation. Every expected number
// is written out here from the reference's rules, not taken from the builder.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <map>
#include <set>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/costs.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/params.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

std::string layout_error(const LayoutRequest& r, ModelDims d = tiny_model()) {
  try {
    resolve_layout(r, d);
  } catch (const ScheduleError& e) {
    CHECK(e.code() == ErrorCode::BadConfig);
    return e.what();
  }
  return "";
}

std::string build_error(const std::string& pattern, const ParallelConfig& c, const ScheduleOptions& o,
                        const ModelDims& d = tiny_model()) {
  try {
    make_plan(pattern, c, o, d);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

ParallelConfig grid(int tp, int cp, int dp, int pp, int ep, int mbs = 1, int vpp = 0) {
  ParallelConfig c;
  c.tp = tp;
  c.cp = cp;
  c.dp = dp;
  c.pp = pp;
  c.ep = ep;
  c.vpp = vpp;
  c.microbatches = mbs;
  return c;
}

std::vector<const Node*> nodes_of(const Plan& p, int rank, Phase phase, int microbatch = 0) {
  std::vector<const Node*> out;
  for (int id : p.ranks.at(static_cast<std::size_t>(rank)).issue) {
    const Node& n = p.node(id);
    if (n.phase == phase && n.microbatch == microbatch) out.push_back(&n);
  }
  return out;
}

}  // namespace

TEST_CASE("ranks follow Megatron's order tp-cp-dp-pp, experts fold etp-ep-edp over the same ranks",
          "[schedule][layout]") {
  // The worked example of megatron-parallel.md 1.2: world 16, t 2, c 2, dp 2, p 2, e 4.
  const ParallelConfig c = grid(2, 2, 2, 2, 4);
  REQUIRE(c.global_ranks() == 16);
  REQUIRE(c.edp() == 2);
  CHECK(group_members(c, 0, Group::Tp) == std::vector<int>{0, 1});
  CHECK(group_members(c, 5, Group::Tp) == std::vector<int>{4, 5});
  CHECK(group_members(c, 0, Group::Cp) == std::vector<int>{0, 2});
  CHECK(group_members(c, 1, Group::Cp) == std::vector<int>{1, 3});
  CHECK(group_members(c, 0, Group::Dp) == std::vector<int>{0, 2, 4, 6});  // dp x cp: dense gradients
  CHECK(group_members(c, 9, Group::Dp) == std::vector<int>{9, 11, 13, 15});
  CHECK(group_members(c, 1, Group::Pp) == std::vector<int>{1, 9});
  CHECK(group_members(c, 2, Group::Ep) == std::vector<int>{0, 1, 2, 3});
  CHECK(group_members(c, 14, Group::Ep) == std::vector<int>{12, 13, 14, 15});
  CHECK(group_members(c, 1, Group::Edp) == std::vector<int>{1, 5});
  const RankCoords r13 = rank_coords(c, 13);  // 13 = 1 + 2 (0 + 2 (1 + 2 x 1))
  CHECK(r13 == RankCoords{1, 0, 1, 1, 0, 1, 1});
  // tp = cp = etp = 1 is the old numbering: rank = pp x dp + dp rank, EP groups consecutive.
  const ParallelConfig old = grid(1, 1, 4, 2, 2);
  CHECK(rank_coords(old, 6).pp == 1);
  CHECK(rank_coords(old, 6).dp == 2);
  CHECK(group_members(old, 6, Group::Ep) == std::vector<int>{6, 7});
  CHECK(group_members(old, 5, Group::Edp) == std::vector<int>{5, 7});
}

TEST_CASE("the layout derives dp and microbatches and names the rule it refuses", "[schedule][layout]") {
  ModelDims d = tiny_model();
  d.micro_batch = 1;
  LayoutRequest r;
  r.ep = 8;  // alone: the smallest dp whose ranks hold ep
  CHECK(resolve_layout(r, d).dp == 8);
  r.tp = 2;  // ep folds over tp x dp: dp 4
  CHECK(resolve_layout(r, d).dp == 4);
  LayoutRequest q;
  q.gpus = 128;
  q.pp = 4;
  q.vpp = 3;
  q.ep = 32;
  q.gbs = 256;
  const ParallelConfig c = resolve_layout(q, d);
  CHECK(c.dp == 32);
  CHECK(c.microbatches == 8);  // 256 / (32 x 1)
  CHECK(c.edp() == 1);

  LayoutRequest bad = q;
  bad.gpus = 130;
  CHECK_THAT(layout_error(bad, d), Catch::Contains("gpus = 130 must be a multiple of tp x cp x pp = 4"));
  bad = q;
  bad.ep = 64;
  CHECK_THAT(layout_error(bad, d), Catch::Contains("ep x etp = 64 must divide tp x cp x dp = 32"));
  bad = q;
  bad.gbs = 250;
  CHECK_THAT(layout_error(bad, d), Catch::Contains("gbs = 250 must be a multiple of dp x mbs"));
  bad = q;
  bad.dp = 16;
  CHECK_THAT(layout_error(bad, d), Catch::Contains("disagree"));
}

TEST_CASE("layouts that do not divide the model are refused with the rule", "[schedule][layout]") {
  const ModelDims d = tiny_model();  // 4 heads, 2 kv heads, 8 mamba heads, 2 groups, seq 32
  CHECK_THAT(build_error("*-", grid(8, 1, 1, 1, 1), options(false, false)),
             Catch::Contains("num_heads = 4 must be a multiple of tp = 8"));
  CHECK_THAT(build_error("M-", grid(4, 1, 1, 1, 1), options(false, false)),
             Catch::Contains("mamba_groups = 2 must be a multiple of tp = 4"));
  ModelDims seq = d;
  seq.seq_len = 36;
  CHECK_THAT(build_error("*-", grid(1, 4, 1, 1, 1), options(false, false), seq),
             Catch::Contains("seq_len = 36 must be a multiple of 2 x cp = 8"));
  CHECK_THAT(build_error("G-", grid(1, 8, 1, 1, 1), options(false, false)),
             Catch::Contains("must be a multiple of tp x cp = 8"));
  ModelDims mamba = d;
  mamba.mamba_num_heads = 12;
  mamba.mamba_groups = 4;
  CHECK_THAT(build_error("M-", grid(2, 4, 1, 1, 1), options(false, false), mamba),
             Catch::Contains("mamba_num_heads / tp = 6 must be a multiple of cp = 4"));
  // Tensor parallelism larger than the kv heads replicates one head per rank (TE): allowed
  // when it is a multiple of them.
  CHECK(build_error("*-", grid(4, 1, 1, 1, 1), options(false, false)).empty());
}

TEST_CASE("pipe-less patterns split their logical layers evenly, counting embedding and loss if needed",
          "[schedule][layout]") {
  // 10 logical layers over pp 2 x vpp 2 = 4 stages: 10 % 4 != 0, (10 + 2) / 4 = 3 per stage with
  // the embedding taking a slot of the first stage and the loss one of the last.
  std::string pattern;
  for (int i = 0; i < 10; ++i) pattern += "[*-]";
  ParallelConfig c = grid(1, 1, 1, 2, 1, 4, 2);
  const auto p = ht::patterns::parse(pattern);
  PipelineSplit used;
  const auto stages = split_stages(p, c, &used);
  CHECK(used.account_embedding);
  CHECK(used.account_loss);
  REQUIRE(stages.size() == 4);
  CHECK(stages[0].items.size() == 2);
  CHECK(stages[1].items.size() == 3);
  CHECK(stages[2].items.size() == 3);
  CHECK(stages[3].items.size() == 2);
  CHECK(stages[1].pp_rank == 1);
  CHECK(stages[2].vp_stage == 1);
  CHECK(stages[3].logical_offset == 8);
  // Asked for explicitly, only the embedding: (10 + 1) does not divide 4.
  c.split.account_embedding = true;
  CHECK_THROWS_AS(split_stages(p, c), ScheduleError);
  // 12 layers over 4 stages divide: nothing is counted.
  const auto even = ht::patterns::parse(pattern + "[*-][*-]");
  c.split = {};
  const auto plain = split_stages(even, c, &used);
  CHECK_FALSE(used.account_embedding);
  CHECK(plain[0].items.size() == 3);
  const Plan plan = make_plan(pattern, grid(1, 1, 1, 2, 1, 4, 2), options(false, false));
  CHECK(plan.account_embedding);
}

TEST_CASE("first/last pipeline stage layer counts: Megatron's uneven split of the decoder layers",
          "[schedule][layout]") {
  // DeepSeek-V3's 61 decoder layers on pp 8 (megatron-parallel.md 5.1): rank 0 holds 7, rank 7
  // holds 6, the six middle ranks (61 - 13) / 6 = 8 each. A bracketed group is one layer.
  std::string pattern;
  for (int i = 0; i < 61; ++i) pattern += "[*E]";
  const auto p = ht::patterns::parse(pattern);
  ParallelConfig c = grid(1, 1, 1, 8, 1, 8);
  c.split.first_stage_layers = 7;
  c.split.last_stage_layers = 6;
  PipelineSplit used;
  const auto stages = split_stages(p, c, &used);
  CHECK(used == c.split);
  REQUIRE(stages.size() == 8);
  const std::vector<std::size_t> expected{7, 8, 8, 8, 8, 8, 8, 6};
  int offset = 0;
  for (std::size_t k = 0; k < 8; ++k) {
    CHECK(stages[k].items.size() == expected[k]);
    CHECK(stages[k].pp_rank == static_cast<int>(k));
    CHECK(stages[k].logical_offset == offset);
    CHECK(stages[k].physical_offset == 2 * offset);
    offset += static_cast<int>(expected[k]);
  }
  // Only the first given: the other seven ranks split 61 - 5 = 56 evenly.
  c.split.last_stage_layers = -1;
  c.split.first_stage_layers = 5;
  const auto first_only = split_stages(p, c);
  CHECK(first_only.front().items.size() == 5);
  CHECK(first_only.back().items.size() == 8);
  // With vpp 2 every rank's count splits over its two chunks; stage k = chunk k / pp of rank k % pp.
  std::string even;
  for (int i = 0; i < 24; ++i) even += "[*-]";
  ParallelConfig v = grid(1, 1, 1, 4, 1, 4, 2);
  v.split.first_stage_layers = 4;  // 2 + 2
  v.split.last_stage_layers = 8;   // 4 + 4
  const auto chunks = split_stages(ht::patterns::parse(even), v);  // middle ranks: (24 - 12) / 2 = 6 = 3 + 3
  REQUIRE(chunks.size() == 8);
  const std::vector<std::size_t> per_chunk{2, 3, 3, 4, 2, 3, 3, 4};
  for (std::size_t k = 0; k < 8; ++k) {
    CHECK(chunks[k].items.size() == per_chunk[k]);
    CHECK(chunks[k].vp_stage == static_cast<int>(k / 4));
  }
  CHECK(chunks[4].logical_offset == 12);
  // Refusals name the numbers: middle layers that do not divide, a count above the model, a rank's
  // count that does not divide over its chunks, the account-for flags, '|' segments, pp 1.
  auto refusal = [&](const ht::patterns::ParsedPattern& pat, const ParallelConfig& cfg) -> std::string {
    try {
      split_stages(pat, cfg);
    } catch (const ScheduleError& e) {
      return e.what();
    }
    return "";
  };
  c.split.first_stage_layers = 6;
  CHECK_THAT(refusal(p, c), Catch::Contains("55 layers") && Catch::Contains("7 middle ranks"));
  c.split.first_stage_layers = 62;
  CHECK_THAT(refusal(p, c), Catch::Contains("more than the model's 61 layers"));
  v.split.first_stage_layers = 3;
  v.split.last_stage_layers = 9;
  CHECK_THAT(refusal(ht::patterns::parse(even), v), Catch::Contains("pipeline rank 0 holds 3 layers"));
  c.split.first_stage_layers = 7;
  c.split.account_loss = true;
  CHECK_THAT(refusal(p, c), Catch::Contains("cannot be combined with counting the embedding or loss"));
  c.split.account_loss = false;
  CHECK_THAT(refusal(ht::patterns::parse("[*E]|[*E]"), grid(1, 1, 1, 2, 1, 2)),
             Catch::Equals(""));
  ParallelConfig piped = grid(1, 1, 1, 2, 1, 2);
  piped.split.first_stage_layers = 1;
  CHECK_THAT(refusal(ht::patterns::parse("[*E]|[*E]"), piped), Catch::Contains("'|' separators"));
  // The plan builds with the uneven stages: rank 0 computes layers 0-6, the last rank 55-60.
  c.split = {};
  c.split.first_stage_layers = 7;
  c.split.last_stage_layers = 6;
  const Plan plan = make_plan(pattern, c, options(false, false));
  auto layers_of = [&](const RankPlan& r) {
    std::set<int> out;
    for (int id : r.issue)
      if (plan.node(id).phase == Phase::Forward && plan.node(id).layer >= 0 && !plan.node(id).mtp)
        out.insert(plan.node(id).layer);
    return out;
  };
  CHECK(layers_of(plan.ranks.front()) == std::set<int>{0, 1, 2, 3, 4, 5, 6});
  CHECK(layers_of(plan.ranks.back()) == std::set<int>{55, 56, 57, 58, 59, 60});
  CHECK(layers_of(plan.ranks[1]).size() == 8);
}

TEST_CASE("TP splits a block's compute by tp and wraps it in SP all-gather and reduce-scatter on the compute stream",
          "[schedule][layout]") {
  const ModelDims d = tiny_model();
  const Plan one = make_plan("-", grid(1, 1, 1, 1, 1), options(false, false), d);
  const Plan two = make_plan("-", grid(2, 1, 1, 1, 1), options(false, false), d);
  const auto f1 = nodes_of(one, 0, Phase::Forward);
  const auto f2 = nodes_of(two, 0, Phase::Forward);
  // tp 1: embedding, mlp, post_process. tp 2: embedding + RS, AG + mlp + RS, AG + post_process.
  auto mlp = [](const std::vector<const Node*>& nodes) {
    std::vector<const Node*> out;
    for (const Node* n : nodes)
      if (n->slot == Slot::Mlp) out.push_back(n);
    return out;
  };
  REQUIRE(mlp(f1).size() == 1);
  REQUIRE(mlp(f2).size() == 3);
  const double t = d.tokens(), h = d.hidden, f = d.ffn_hidden;
  // Forward GEMMs 2 t h (2f) + 2 t f h, SwiGLU 3 t f, the layer's norm and residual add 5 t h on
  // the owned tokens, all divided by tp (columns, rows or tokens).
  CHECK(mlp(f1)[0]->flops == Approx(2 * t * h * 2 * f + 2 * t * f * h + 3 * t * f + 5 * t * h));
  CHECK(mlp(f2)[1]->flops == Approx(mlp(f1)[0]->flops / 2));
  const Node& gather = *mlp(f2)[0];
  const Node& scatter = *mlp(f2)[2];
  CHECK(gather.part == Part::TpGather);
  CHECK(scatter.part == Part::TpScatter);
  CHECK(gather.stream == Stream::Compute);
  // Each rank owns t / tp tokens of h elements and sends them to its one TP peer.
  REQUIRE(gather.sends.size() == 1);
  CHECK(gather.sends[0].peer == 1);
  CHECK(gather.sends[0].bytes == Approx(t / 2 * h * d.bytes_per_element));
  CHECK(scatter.sends[0].bytes == Approx(t / 2 * h * d.bytes_per_element));
  const Collective& cg = two.collectives.at(static_cast<std::size_t>(gather.collective));
  CHECK(cg.kind == CollectiveKind::AllGather);
  CHECK(cg.group == Group::Tp);
  CHECK(cg.nodes.size() == 2);
  CHECK(two.collectives.at(static_cast<std::size_t>(scatter.collective)).kind == CollectiveKind::ReduceScatter);
  // Backward: gather the output gradient, compute (re-gathering the input alongside), scatter
  // the input gradient.
  const auto b2 = mlp(nodes_of(two, 0, Phase::Backward));
  REQUIRE(b2.size() == 3);
  CHECK(b2[0]->part == Part::TpGather);
  CHECK(b2[1]->part == Part::Main);
  CHECK(b2[1]->collective >= 0);  // the overlapped re-gather
  CHECK(b2[2]->part == Part::TpScatter);
  // The pipeline and all-to-all volumes shrink to the owned tokens.
  CHECK(pipe_bytes(d, {2, 1, 1}) == Approx(pipe_bytes(d) / 2));
  CHECK(routed_payload_bytes(d, {2, 2, 1}) == Approx(routed_payload_bytes(d) / 4));
}

TEST_CASE("CP: attention carries its key/value ring overlapped with the core; Mamba exchanges heads", "[schedule][layout]") {
  const ModelDims d = tiny_model();  // 4 heads, 2 kv heads of 16, seq 32, micro batch 2
  const Plan plan = make_plan("*M", grid(1, 2, 1, 1, 1), options(false, false), d);
  const auto f = nodes_of(plan, 0, Phase::Forward);
  const Node* attention = nullptr;
  const Node* exchange = nullptr;
  for (const Node* n : f) {
    if (n->symbols == "*" && n->part == Part::Main) attention = n;
    if (n->part == Part::CpExchange) exchange = n;
  }
  REQUIRE(attention != nullptr);
  REQUIRE(exchange != nullptr);
  // (cp - 1) = 1 block of K and V: N = 2 x 32 / 2 tokens x 2 kv heads x (16 + 16) x 2 bytes.
  REQUIRE(attention->sends.size() == 1);
  CHECK(attention->sends[0].peer == 1);
  CHECK(attention->sends[0].bytes == Approx(32.0 * 2 * 32 * 2));
  CHECK(plan.collectives.at(static_cast<std::size_t>(attention->collective)).group == Group::Cp);
  // Mamba under CP: z, x (2 x 128), B, C (2 x 2 x 16, groups replicated to cp), dt (8), y (128)
  // per token of the shard, each exchange keeping 1/cp.
  const double elements = 32.0 * (2 * 128 + 2 * 2 * 16 + 8 + 128);
  CHECK(exchange->sends[0].bytes == Approx(elements * 2 / 2));
  // The attention core's work is 1/cp of the whole sequence's.
  const Plan one = make_plan("*M", grid(1, 1, 1, 1, 1), options(false, false), d);
  double core_one = 0, core_two = 0;
  for (const Node* n : nodes_of(one, 0, Phase::Forward))
    if (n->slot == Slot::PreDispatch) core_one += n->flops;
  for (const Node* n : f)
    if (n->slot == Slot::PreDispatch) core_two += n->flops;
  CHECK(core_two == Approx(core_one / 2));
}

TEST_CASE("Megatron's DDP: bucketed reductions wait for the last microbatch's backward of their layers",
          "[schedule][layout]") {
  ModelDims d = tiny_model();
  ParallelConfig c = grid(1, 1, 2, 1, 1, 3);
  c.optimizer.sync = GradSync::Megatron;
  c.optimizer.distributed = true;
  c.optimizer.overlap_grad_reduce = true;
  c.optimizer.overlap_param_gather = true;
  // Buckets of 3000 elements over 4 dense layers of about 2 x 64 x 128 + 64 x 128... elements.
  c.optimizer.bucket_elements = 30000;
  const Plan plan = make_plan("----", c, options(false, false), d);
  std::vector<const Node*> reduces, gathers;
  const Node* step = nullptr;
  for (int id : plan.ranks[0].issue) {
    const Node& n = plan.node(id);
    if (n.slot == Slot::GradAllReduce) reduces.push_back(&n);
    if (n.slot == Slot::ParamGather) gathers.push_back(&n);
    if (n.slot == Slot::OptimizerStep) step = &n;
  }
  // '-' holds 3 x 64 x 128 + 64 = 24640 elements: buckets close after 2 layers (embedding 8192
  // and output 8192 + 64 fall in the last and first bucket).
  REQUIRE(reduces.size() >= 2);
  REQUIRE(gathers.size() == reduces.size());
  REQUIRE(step != nullptr);
  for (const Node* r : reduces) {
    CHECK(r->stream == Stream::Dp);
    CHECK(plan.collectives.at(static_cast<std::size_t>(r->collective)).kind == CollectiveKind::ReduceScatter);
    for (int dep : r->deps) CHECK(plan.node(dep).microbatch == 2);  // the last microbatch only
  }
  // The first bucket (the output end) is ready before the backward reaches the first layers.
  int last_backward = 0;
  for (int id : plan.ranks[0].issue)
    if (plan.node(id).phase == Phase::Backward && plan.node(id).microbatch == 2) last_backward = std::max(last_backward, id);
  CHECK(*std::max_element(reduces.front()->deps.begin(), reduces.front()->deps.end()) < last_backward);
  // Every forward of microbatch 0 of a layer waits for its bucket's parameter gather.
  for (int id : plan.ranks[0].issue) {
    const Node& n = plan.node(id);
    if (n.phase == Phase::Forward && n.microbatch == 0 && n.slot == Slot::Mlp) {
      const bool waits = std::any_of(n.deps.begin(), n.deps.end(),
                                     [&](int dep) { return plan.node(dep).slot == Slot::ParamGather; });
      CHECK(waits);
    }
  }
  // Reduce-scatter bytes: fp32 gradients, 1/dp of the bucket to each peer.
  double bucketed = 0;
  for (const Node* r : reduces) {
    bucketed += r->mem_bytes / 4;
    CHECK(r->sends[0].bytes == Approx(r->mem_bytes / 2));
  }
  const double layer = 3.0 * 64 * 128 + 64;
  CHECK(bucketed == Approx(4 * layer + 128.0 * 64 + 128.0 * 64 + 64));
  // The optimizer step reads and writes every sharded parameter: 34 bytes each over dp 2.
  CHECK(step->mem_bytes == Approx(34 * bucketed / 2));
  // Without overlap there is one reduction per buffer after the whole backward.
  c.optimizer.overlap_grad_reduce = false;
  c.optimizer.overlap_param_gather = false;
  const Plan late = make_plan("----", c, options(false, false), d);
  int late_reduces = 0;
  for (const Node& n : late.nodes) late_reduces += n.slot == Slot::GradAllReduce && n.rank == 0;
  CHECK(late_reduces == 1);
}

TEST_CASE("recomputation replays forward work before the backward and refuses the overlap where Megatron does",
          "[schedule][layout]") {
  const ModelDims d = tiny_model();
  ParallelConfig c = grid(1, 1, 2, 1, 2, 2);
  c.recompute.full = true;
  const Plan full = make_plan("[*E]-", c, options(false, false), d);
  double forward = 0, recompute = 0;
  for (const Node& n : full.nodes)
    if (n.rank == 0 && n.microbatch == 0 && n.layer >= 0) {
      if (n.phase == Phase::Forward) forward += n.flops;
      if (n.phase == Phase::Recompute) recompute += n.flops;
    }
  CHECK(recompute == Approx(forward));
  // The replayed all-to-alls rendezvous like the forward's.
  int recomputed_a2a = 0;
  for (const Node& n : full.nodes) recomputed_a2a += n.rank == 0 && n.phase == Phase::Recompute && n.slot == Slot::Dispatch;
  CHECK(recomputed_a2a == 2);
  CHECK_THAT(build_error("[*E]-", c, options(true, true), d), Catch::Contains("full recomputation is not supported"));
  ParallelConfig moe = grid(1, 1, 2, 1, 2, 2);
  moe.recompute = parse_recompute("moe");
  CHECK_THAT(build_error("[*E]", moe, options(true, true), d), Catch::Contains("'moe' module"));
  // Selective moe_act replays the experts' activation only: 3 x copies x moe_ffn flops.
  ParallelConfig act = grid(1, 1, 2, 1, 2, 2);
  act.recompute = parse_recompute("moe_act");
  const Plan plan = make_plan("[*E]", act, options(true, true), d);
  double replayed = 0;
  for (const Node& n : plan.nodes)
    if (n.rank == 0 && n.microbatch == 0 && n.phase == Phase::Recompute) replayed += n.flops;
  CHECK(replayed == Approx(3 * routed_copies(d, 2, 0, 0) * d.moe_ffn_hidden));
  try {
    parse_recompute("core_attn,bogus");
    FAIL("an unknown module was accepted");
  } catch (const ScheduleError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("unknown recompute module 'bogus'"));
  }
}

TEST_CASE("the block recompute method replays the first N layers of each model chunk and keeps the rest",
          "[schedule][layout]") {
  // Twelve '[*-]' layers over pp 2 x vpp 2 = four chunks of three; block N = 2 recomputes the first
  // two of each chunk (0, 1, 3, 4, 6, 7, 9, 10), never the third.
  const ModelDims d = tiny_model();
  ParallelConfig c = grid(1, 1, 1, 2, 1, 2, 2);
  c.recompute.full = true;
  c.recompute.block_layers = 2;
  const std::string chunk3 = "[*-][*-][*-]";
  const std::string pattern = chunk3 + "|" + chunk3 + "|" + chunk3 + "|" + chunk3;
  const Plan plan = make_plan(pattern, c, options(false, false), d);
  std::set<int> replayed;
  for (const Node& n : plan.nodes)
    if (n.phase == Phase::Recompute && n.layer >= 0) replayed.insert(n.layer);
  CHECK(replayed == std::set<int>{0, 1, 3, 4, 6, 7, 9, 10});
  CHECK(to_string(c.recompute) == "full (block 2)");
  // Memory by hand: a recomputed layer keeps its input (tokens x hidden x 2 bytes), the others what
  // they keep without recompute; the block method's total sits between, layer by layer.
  const auto parsed = ht::patterns::parse(pattern);
  ParallelConfig none = c, every = c;
  none.recompute = {};
  every.recompute.block_layers = -1;
  const double input = layer_activation_bytes("*-", false, d, every);
  const double plain = layer_activation_bytes("*-", false, d, none);
  CHECK(input == Approx(owned_tokens(d, shard_of(c)) * d.hidden * d.bytes_per_element));
  REQUIRE(plain > input);
  const double block_kept = peak_memory(parsed, d, c, plan, Precision::Bf16).activations;
  const Plan every_plan = make_plan(pattern, every, options(false, false), d);
  const Plan none_plan = make_plan(pattern, none, options(false, false), d);
  const double every_kept = peak_memory(parsed, d, every, every_plan, Precision::Bf16).activations;
  const double none_kept = peak_memory(parsed, d, none, none_plan, Precision::Bf16).activations;
  CHECK(every_kept < block_kept);
  CHECK(block_kept < none_kept);
  // Block N >= the chunk's layers is full recomputation; N = 0 is none.
  ParallelConfig all = c, zero = c;
  all.recompute.block_layers = 3;
  zero.recompute.block_layers = 0;
  CHECK(peak_memory(parsed, d, all, make_plan(pattern, all, options(false, false), d), Precision::Bf16).activations ==
        Approx(every_kept));
  int zero_replays = 0;
  for (const Node& n : make_plan(pattern, zero, options(false, false), d).nodes) zero_replays += n.phase == Phase::Recompute;
  CHECK(zero_replays == 0);
}

TEST_CASE("Megatron-FSDP gathers each unit before its forward and backward and reduce-scatters it after",
          "[schedule][layout]") {
  // Two layers plus the embedding and the output (final norm) are four units; dp 2, two
  // microbatches: per microbatch every unit is gathered twice (forward, backward) and reduced once.
  // The bytes, counted from the model's parameter count (params.hpp), not from the builder:
  // gathers carry bf16 weights, reductions fp32 gradients, 1/dp of them to each of the dp - 1 peers.
  const ModelDims d = tiny_model();
  ParallelConfig c = grid(1, 1, 2, 1, 1, 2);
  c.optimizer.sync = GradSync::Megatron;
  c.optimizer.fsdp = true;
  const std::string pattern = "[*-][*-]";
  const Plan plan = make_plan(pattern, c, options(false, false), d);
  const double total = count_params(ht::patterns::parse(pattern), d).total;
  int gathers = 0, reduces = 0;
  double gathered = 0, reduced = 0;
  int last_reduce = -1, optimizer = -1;
  const RankPlan& r0 = plan.ranks.front();
  for (std::size_t i = 0; i < r0.issue.size(); ++i) {
    const Node& n = plan.node(r0.issue[i]);
    double sent = 0;
    for (const Transfer& t : n.sends) sent += t.bytes;
    if (n.slot == Slot::ParamGather) ++gathers, gathered += sent;
    if (n.slot == Slot::GradAllReduce) ++reduces, reduced += sent, last_reduce = static_cast<int>(i);
    if (n.slot == Slot::OptimizerStep) optimizer = static_cast<int>(i);
  }
  CHECK(gathers == 4 * 2 * 2);
  CHECK(reduces == 4 * 2);
  CHECK(gathered == Approx(2 /* microbatches */ * 2 /* passes */ * total * 2 / 2));
  CHECK(reduced == Approx(2 * total * 4 / 2));
  REQUIRE(optimizer >= 0);
  CHECK(last_reduce < optimizer);
  // The optimizer updates the rank's shard: 12 flops per parameter over 1/dp of them.
  CHECK(plan.node(r0.issue[static_cast<std::size_t>(optimizer)]).flops == Approx(12 * total / 2));
  // Each unit's first node of a pass and microbatch waits for that unit's gather.
  int waiting = 0;
  for (const Node& n : plan.nodes)
    if (n.rank == 0)
      for (int dep : n.deps) waiting += plan.node(dep).slot == Slot::ParamGather;
  CHECK(waiting == 4 * 2 * 2);  // one first node per unit, pass and microbatch
  CHECK_NOTHROW(check_plan_structure(plan));
  CHECK(find_deadlock(plan).empty());
  // Memory by hand: the shard of weights (2 B), gradients (4 B) and optimizer state (12 B), plus
  // two gathered units of weights and one of gradients (the largest unit: the embedding or a layer).
  const ModelParams one = count_params(ht::patterns::parse("[*-]"), d);
  const double largest = std::max(double(d.vocab) * d.hidden, one.total - one.embedding - one.output);
  const MemoryBreakdown m = peak_memory(ht::patterns::parse(pattern), d, c, plan, Precision::Bf16);
  CHECK(m.weights == Approx(2 * (total / 2 + 2 * largest)));
  CHECK(m.gradients == Approx(4 * (total / 2 + largest)));
  CHECK(m.optimizer == Approx(12 * total / 2));
  // Delayed weight gradients are refused with FSDP, as Megatron-LM refuses them; the EP overlap
  // runs without them, each unit still gathered before every microbatch's forward and backward.
  ParallelConfig moe = grid(1, 1, 2, 1, 2, 2);
  moe.optimizer = c.optimizer;
  CHECK_THAT(build_error("[*E][*E]", moe, options(true, true), d),
             Catch::Contains("Megatron-FSDP does not take delayed weight gradients") && Catch::Contains("--no-delay-wgrad"));
  const Plan overlapped = make_plan("[*E][*E]", moe, options(true, false), d);
  CHECK(overlapped.overlap);
  int layer_gathers = 0;
  for (const Node& n : overlapped.nodes)
    layer_gathers += n.rank == 0 && n.slot == Slot::ParamGather && n.layer >= 0;
  // 4 units (embedding, two layers, output; the experts' group has one member: nothing to gather)
  // x 2 microbatches x (forward, backward).
  CHECK(layer_gathers == 4 * 2 * 2);
}

TEST_CASE("gradients in bf16 (--grad-reduce-in-bf16) halve every reduction and the gradient memory, not the gathers",
          "[schedule][layout]") {
  // Counted from the model's parameter count (params.hpp), as the FSDP test above: with the main
  // gradients in bf16 every reduction carries 2 bytes a parameter where fp32 carries 4, the
  // gathers keep their bf16 weights, the gradient memory is 2 bytes a parameter and the
  // optimizer step reads 2 bytes less of each gradient twice (30 bytes an element against 34).
  const ModelDims d = tiny_model();
  const std::string pattern = "[*-][*-]";
  const double total = count_params(ht::patterns::parse(pattern), d).total;
  for (const bool fsdp : {false, true}) {
    CAPTURE(fsdp);
    ParallelConfig c = grid(1, 1, 2, 1, 1, 2);
    c.optimizer.sync = GradSync::Megatron;
    c.optimizer.fsdp = fsdp;
    c.optimizer.distributed = !fsdp;
    c.optimizer.overlap_grad_reduce = !fsdp;
    double reduced[2] = {0, 0}, gathered[2] = {0, 0}, step_bytes[2] = {0, 0}, gradients[2] = {0, 0};
    for (const bool bf16 : {false, true}) {
      c.optimizer.grad_reduce_bf16 = bf16;
      const Plan plan = make_plan(pattern, c, options(false, false), d);
      for (const Node& n : plan.nodes) {
        if (n.rank != 0) continue;
        double sent = 0;
        for (const Transfer& t : n.sends) sent += t.bytes;
        if (n.slot == Slot::GradAllReduce) reduced[bf16] += sent;
        if (n.slot == Slot::ParamGather) gathered[bf16] += sent;
        if (n.slot == Slot::OptimizerStep) step_bytes[bf16] += n.mem_bytes;
      }
      gradients[bf16] = peak_memory(ht::patterns::parse(pattern), d, c, plan, Precision::Bf16).gradients;
    }
    // FSDP reduces every microbatch (2), the distributed optimizer once; 1/dp to the one peer.
    const double reductions = fsdp ? 2 : 1;
    CHECK(reduced[0] == Approx(reductions * total * 4 / 2));
    CHECK(reduced[1] == Approx(reductions * total * 2 / 2));
    CHECK(gathered[1] == Approx(gathered[0]));
    CHECK(gathered[0] > 0);
    CHECK(step_bytes[0] == Approx(34 * total / 2));
    CHECK(step_bytes[1] == Approx(30 * total / 2));
    CHECK(gradients[1] == Approx(gradients[0] / 2));
  }
  // EndOfStep (the engine's all-reduce) has no such switch.
  ParallelConfig e = grid(1, 1, 2, 1, 1, 2);
  e.optimizer.grad_reduce_bf16 = true;
  CHECK_THAT(build_error(pattern, e, options(false, false), d), Catch::Contains("--grad-reduce-in-bf16"));
}

TEST_CASE("plans with tp > 1 pass the structural and deadlock checks and the engines refuse them",
          "[schedule][layout]") {
  ParallelConfig c = grid(2, 2, 2, 2, 4, 4, 2);
  c.optimizer.sync = GradSync::Megatron;
  c.optimizer.distributed = true;
  c.optimizer.overlap_grad_reduce = true;
  c.optimizer.overlap_param_gather = true;
  c.recompute = parse_recompute("moe_act,layernorm");
  ModelDims d = tiny_model();
  d.shared_expert_ffn = 32;
  const Plan plan = make_plan("[M*E]|[*E]|[M-]|[*E]", c, options(true, true), d);
  CHECK(plan.ranks.size() == 16);
  for (const Collective& col : plan.collectives) {
    // Every member of a collective sits on a distinct rank of one group instance.
    std::vector<int> ranks;
    for (int m : col.nodes) ranks.push_back(plan.node(m).rank);
    std::sort(ranks.begin(), ranks.end());
    if (col.kind != CollectiveKind::PointToPoint) CHECK(ranks == group_members(c, ranks.front(), col.group));
  }
  CHECK(beyond_engines(plan).find("tensor parallelism (tp 2)") != std::string::npos);
}

// Issue 28 item 5: the runtime overhead counted against HBM, by a plain count of the stated
// rules (one NCCL communicator per group of more than one rank that runs collectives: 688 MB,
// a pair 544 MB; an NCCL all-to-all 3.28 GB; DeepEP's buffer from DeepEP's own size-hint
// formula, written out term by term for EP 32 and hidden 4096; the CUDA context 400 MB).
TEST_CASE("runtime overhead: CUDA context, one NCCL communicator per group used, DeepEP's sized buffer",
          "[schedule][memory]") {
  const auto moe = ht::patterns::parse("[*E][*E][*E][*E][*E][*E][*E][*E]");
  ModelDims d;
  d.hidden = 4096, d.num_experts = 128, d.top_k = 8;
  ParallelConfig c;
  c.tp = 2, c.pp = 8, c.dp = 16, c.ep = 32;  // 256 GPUs; edp = 32 / 32 = 1
  // DeepEP, EP 32: 10 channels, 8 NVLink ranks, 4 RDMA ranks, 288 NVLink and 128 RDMA tokens;
  // a token slot holds 8192 hidden bytes, 8 of metadata, 128 x 8 top-k ids, 128 x 4 weights and
  // 128 x 4 scales (+ 16 on the RDMA side), both RDMA directions.
  const double token = 8192 + 8 + 1024 + 512 + 512;
  const double nvl = 10.0 * 8 * (2 * 4 + 3) * 4 + 10.0 * 8 * 288 * token;
  const double rdma = 10.0 * 4 * (8 * 2 + 2) * 2 * 4 + 10.0 * 4 * 128 * (token + 16) * 2;
  RuntimeOverhead o = runtime_overhead(moe, d, c, Dispatcher::DeepEP);
  CHECK(o.cuda_context == 400e6);
  // tp pair, dp 16, pipeline pair, the gradient norm over all 256.
  CHECK(o.communicators == 4);
  CHECK(o.nccl == Approx(544e6 + 688e6 + 544e6 + 688e6).epsilon(1e-12));
  CHECK(o.dispatcher == Approx(nvl + rdma).epsilon(1e-12));
  CHECK(o.total() == Approx(400e6 + 2464e6 + nvl + rdma).epsilon(1e-12));

  // The all-to-all dispatcher runs NCCL's all-to-all instead of DeepEP's buffer.
  o = runtime_overhead(moe, d, c, Dispatcher::AllToAll);
  CHECK(o.dispatcher == 0);
  CHECK(o.communicators == 5);
  CHECK(o.nccl == Approx(2464e6 + 3.28e9).epsilon(1e-12));

  // Expert data parallelism and expert TP add their groups; a dense pattern has neither.
  c.ep = 8, c.etp = 2;  // edp = 32 / 16 = 2
  o = runtime_overhead(moe, d, c, Dispatcher::AllGather);
  CHECK(o.communicators == 4 + 3);  // + edp pair, etp pair, the tp x ep all-gather group
  CHECK(o.nccl == Approx(2464e6 + 544e6 + 544e6 + 688e6).epsilon(1e-12));
  const auto dense = ht::patterns::parse("*-*-*-*-*-*-*-*-");
  o = runtime_overhead(dense, d, c, Dispatcher::AllGather);
  CHECK(o.communicators == 4);
  ParallelConfig one;
  o = runtime_overhead(dense, d, one, Dispatcher::AllToAll);
  CHECK(o.communicators == 0);
  CHECK(o.total() == 400e6);
}

// Megatron's uniform method with --recompute-num-layers N: units of N consecutive layers of a
// chunk keep only the unit's input and rerun the whole unit before its backward. By hand, one
// microbatch, no pipeline, L = 16 layers of the same kind whose working set dwarfs the output's
// (vocabulary 64): the peak sits at the last unit's backward, with the embedding, the other units'
// inputs and the unit's N working sets live: peak(N) - peak(1) = (L/N - L) kept + (N - 1) working.
TEST_CASE("uniform recompute of N layers: one input kept per unit, N working sets at its backward",
          "[schedule][memory]") {
  ModelDims d = tiny_model();
  d.vocab = 64;
  const std::string pattern = "[*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-][*-]";
  const auto parsed = ht::patterns::parse(pattern);
  ParallelConfig c = grid(1, 1, 1, 1, 1, 1);
  c.recompute.full = true;
  double working = 0;
  const double kept = layer_activation_bytes("*-", false, d, c, &working);
  REQUIRE(working > 4 * kept);
  auto peak = [&](int n) {
    ParallelConfig u = c;
    u.recompute.uniform_layers = n;
    return peak_memory(parsed, d, u, make_plan(pattern, u, options(false, false), d), Precision::Bf16).activations;
  };
  const double one = peak(1);
  for (const int n : {2, 4, 8, 16}) {
    INFO("N = " << n);
    CHECK(peak(n) - one == Approx((16.0 / n - 16) * kept + (n - 1) * working).epsilon(1e-9));
  }
  ParallelConfig u = c;
  u.recompute.uniform_layers = 4;
  CHECK(to_string(u.recompute) == "full (uniform 4)");
  // The step's work is the same: every layer's forward reruns once whatever N.
  int replays_1 = 0, replays_4 = 0;
  for (const Node& n : make_plan(pattern, c, options(false, false), d).nodes) replays_1 += n.phase == Phase::Recompute;
  for (const Node& n : make_plan(pattern, u, options(false, false), d).nodes) replays_4 += n.phase == Phase::Recompute;
  CHECK(replays_1 == replays_4);
}

// Fine-grained activation offloading (Megatron's --offload-modules), counted by hand on a model
// small enough to count: hidden 64, 4 query heads and 2 KV heads of 16, 2 of the experts' 32-wide
// SwiGLU per token. Per owned token: attn_norm and qkv_linear the hidden size each (64), core_attn
// Q, K and V (64 + 2 x 2 x 16 = 128), attn_proj the core's output (64); mlp_norm the hidden size;
// expert_fc1 the 2 routed copies of the token (128), moe_act fc1's 2 x 64 outputs (256: gate and
// up, 2 x 32 each, per copy).
TEST_CASE("activation offloading moves the listed modules' activations off the GPU and across the host link",
          "[schedule][memory][offload]") {
  ModelDims d = tiny_model();
  d.hidden = 64, d.num_heads = 4, d.num_kv_heads = 2, d.head_dim = 16, d.gated_ffn = 1;
  d.num_experts = 4, d.top_k = 2, d.moe_ffn_hidden = 32, d.shared_expert_ffn = 0, d.moe_latent_size = 0;
  d.attn_output_gate = 0;
  ParallelConfig none = grid(1, 1, 2, 1, 2, 2);  // EP 2: the overlap schedule, with W nodes
  ParallelConfig all = none;
  all.offload = parse_offload("attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act");
  CHECK(to_string(all.offload) == "attn_norm,qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act");
  const OffloadSplit attn = offloaded_elements('*', d, all), moe = offloaded_elements('E', d, all);
  CHECK(attn.pre == 64 + 64 + 128 + 64);
  CHECK(attn.mlp == 0);
  CHECK(moe.pre == 64);
  CHECK(moe.mlp == 128 + 2 * 2 * 32);
  CHECK(offloaded_elements('M', d, all).total() == 0);  // Megatron's Mamba layer has no offload groups
  CHECK(offloaded_elements('-', d, all).mlp == 64);
  ParallelConfig core = none;
  core.offload = parse_offload("core_attn");
  CHECK(offloaded_elements('*', d, core).pre == 128);

  // Memory: each layer keeps that much less from its forward to its backward, and holds the next
  // layer's beside its own while its backward runs (reloaded one layer ahead).
  const double tokens = double(d.micro_batch) * d.seq_len, beta = d.bytes_per_element;
  const double off = (attn.total() + moe.total()) * beta * tokens;
  double w_none = 0, w_all = 0;
  const double k_none = layer_activation_bytes("*E", false, d, none, &w_none);
  const double k_all = layer_activation_bytes("*E", false, d, all, &w_all);
  CHECK(k_none - k_all == Approx(off));
  CHECK(w_all - w_none == Approx(off));

  // Time: the forward's nodes of a layer carry its D2H copies and the backward's its H2D reloads,
  // every byte once, split over the slot's compute nodes; recomputed and W nodes carry none.
  const Plan plan = make_plan("*E", all, options(true, true), d);
  std::map<Phase, double> copied;
  for (const Node& n : plan.nodes) {
    if (n.work < 0 || n.rank != 0 || n.microbatch != 0) continue;
    for (const Kernel& k : plan.works.at(static_cast<std::size_t>(n.work)).kernels)
      if (k.kind == KernelKind::HostCopy) copied[n.phase] += k.bytes;
  }
  CHECK(copied[Phase::Forward] == Approx(off));
  CHECK(copied[Phase::Backward] == Approx(off));
  CHECK(copied.count(Phase::Weight) == 0);
  CHECK(copied.count(Phase::Recompute) == 0);
  // Nothing offloaded, nothing copied: the plan is the plan without the option.
  const Plan plain = make_plan("*E", none, options(true, true), d);
  for (const Work& w : plain.works)
    for (const Kernel& k : w.kernels) CHECK(k.kind != KernelKind::HostCopy);

  // Megatron's rules, refused by name.
  const auto refused = [&](const std::string& modules, const std::string& recompute, const std::string& words) {
    ParallelConfig c = none;
    c.offload = parse_offload(modules);
    c.recompute = parse_recompute(recompute);
    try {
      (void)make_plan("*E", c, options(false, false), d);
      FAIL("accepted " << modules << " with recompute " << recompute);
    } catch (const ScheduleError& e) {
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  CHECK_THROWS_WITH(parse_offload("attn_proj"), Catch::Contains("attn_proj needs core_attn"));
  refused("expert_fc1", "moe", "while the whole 'moe' module recomputes");
  refused("core_attn", "full", "nothing to offload");
  CHECK_THROWS_WITH(parse_offload("fused_group_mlp"), Catch::Contains("not modelled"));
  CHECK_THROWS_WITH(parse_offload("core_attn,bogus"), Catch::Contains("unknown offload module 'bogus'"));
  CHECK_THROWS_WITH(parse_offload(""), Catch::Contains("empty"));
}

// Issue 30 item 5: what each selective recompute module adds to a plan, from Megatron's table
// (megatron-parallel.md 6.2) on generated patterns, module sets, TP sizes and shared experts: per
// microbatch and logical layer, the parts replayed (the symbols of its recompute nodes: '*' the
// attention core, '-' the dense MLP, '+' MLA's up-projections or input norm, 'r' the MoE router
// or pre-MLP norm, 'x' the experts, 's' the shared expert) and the collectives replayed with them:
// `core_attn` '*' alone; `mlp` '-' with its TP all-gather and reduce-scatter; `moe` 'r', 'x', 's'
// (with its TP collectives) and both all-to-alls; `moe_act` 'x'; `shared_experts` 's' with its TP
// collectives; `mla_up_proj` '+' with its all-gather; `layernorm` 'r' on MoE layers, '+' on MLA
// layers, no collective. Modules add up (nested ones replay twice); nothing else is replayed.
TEST_CASE("selective recompute: each module replays what Megatron's table says, no more",
          "[schedule][recompute][property]") {
  rc::prop("replayed parts and collectives per module", [] {
    const std::string pattern = *rc::gen::element<std::string>("[*E]-[*E]-", "[+E]-[+E]-", "[*E][*E]", "*-*-",
                                                               "[+-][+E]", "[ME]-[*E]");
    ModelDims d = tiny_model();
    d.shared_expert_ffn = *rc::gen::element(0, 64);
    const bool shared = d.shared_expert_ffn > 0;
    ParallelConfig c = grid(*rc::gen::element(1, 2), 1, 2, 1, 2, 2);
    c.recompute.modules = static_cast<unsigned>(*rc::gen::inRange(1, 128));
    Plan plan;
    try {
      plan = make_plan(pattern, c, options(false, false), d);
    } catch (const ScheduleError&) {
      RC_DISCARD("refused");
    }
    const auto has = [&](RecomputeModule m) { return c.recompute.has(m); };
    const int tp_colls = c.tp > 1 ? 2 : 0;
    std::map<int, std::set<char>> want, got;
    int collectives = 0, a2a = 0;
    int layer = 0;
    for (const auto& item : ht::patterns::parse(pattern).items()) {
      const std::string& s = item.symbols;
      auto& w = want[layer++];
      const bool moe = s.find('E') != std::string::npos, mla = s.find('+') != std::string::npos;
      if (s.find('*') != std::string::npos && has(kRecomputeCoreAttn)) w.insert('*');
      if (s.find('-') != std::string::npos && has(kRecomputeMlp)) w.insert('-'), collectives += tp_colls;
      if (mla && (has(kRecomputeMlaUpProj) || has(kRecomputeLayernorm))) w.insert('+');
      if (mla && has(kRecomputeMlaUpProj)) collectives += c.tp > 1 ? 1 : 0;
      if (moe && has(kRecomputeLayernorm)) w.insert('r');
      if (moe && has(kRecomputeMoe)) {
        w.insert('r'), w.insert('x'), a2a += 2;
        if (shared) w.insert('s');
      }
      if (moe && has(kRecomputeMoeAct)) w.insert('x');
      // Nested checkpoints replay twice, as Megatron's do: `moe` reruns the whole layer, and a
      // checkpointed shared expert or activation inside it reruns once more in its own backward.
      if (moe && shared && has(kRecomputeMoe)) collectives += tp_colls;
      if (moe && shared && has(kRecomputeSharedExperts)) w.insert('s'), collectives += tp_colls;
      if (w.empty()) want.erase(layer - 1);
    }
    int got_collectives = 0, got_a2a = 0;
    for (const Node& n : plan.nodes) {
      if (n.rank != 0 || n.phase != Phase::Recompute || n.microbatch != 0) continue;
      if (n.slot == Slot::Dispatch || n.slot == Slot::Combine) ++got_a2a;
      else if (n.part != Part::Main) ++got_collectives;
      else  // a whole-slot replay names the experts by the layer's 'E', a per-block one by 'x'
        for (char ch : n.symbols) got[n.layer].insert(n.slot == Slot::Mlp && ch == 'E' ? 'x' : ch);
    }
    auto show = [](const std::map<int, std::set<char>>& m) {
      std::string o;
      for (const auto& [l, cs] : m) o += " L" + std::to_string(l) + ":" + std::string(cs.begin(), cs.end());
      return o;
    };
    RC_LOG() << pattern << " tp " << c.tp << " shared " << shared << " modules " << to_string(c.recompute) << ": replayed"
             << show(got) << " (want" << show(want) << "), collectives " << got_collectives << " (" << collectives
             << "), all-to-alls " << got_a2a << " (" << a2a << ")\n";
    RC_ASSERT(got == want);
    RC_ASSERT(got_a2a == a2a);
    RC_ASSERT(got_collectives == collectives);
  });
}

TEST_CASE("the gradient sync switches add and remove exactly the collectives Megatron's DDP issues",
          "[schedule][layout][property]") {
  // One bucket per (model chunk, buffer) with the bucket size out of reach, so the counts follow
  // from the pattern alone (megatron-parallel.md 4): a chunk's dense buffer always holds something
  // (norms at least), its expert buffer only when the chunk has an 'E'. Each bucket of a buffer
  // whose data-parallel group (dense: dp x cp; expert: edp) has two or more members is reduced once:
  // all-reduce, or reduce-scatter with the distributed optimizer, which then gathers it once more;
  // gathered before the forward that needs it (overlap_param_gather) or after the optimizer step;
  // reduced as the last microbatch's backward of its layers ends (overlap_grad_reduce) or after the
  // whole backward. With TP the replicated weights' gradients get one all-reduce over TP. Nothing
  // else in the plan changes.
  rc::prop("reductions, gathers and their dependencies per switch", [] {
    const int pp = *rc::gen::element(1, 2), vpp = pp > 1 ? *rc::gen::element(0, 2) : 0;
    const int segments = pp * std::max(vpp, 1);
    std::vector<std::string> parts;
    for (int s = 0; s < segments; ++s)
      parts.push_back(*rc::gen::element<std::string>("*-", "*E", "M-", "[*E]", "[ME]-", "-", "M"));
    std::string pattern;
    for (int s = 0; s < segments; ++s) pattern += (s ? "|" : "") + parts[static_cast<std::size_t>(s)];
    ParallelConfig c = grid(*rc::gen::element(1, 2), 1, *rc::gen::element(1, 2, 4), pp, 1, *rc::gen::inRange(1, 4), vpp);
    const bool moe = pattern.find('E') != std::string::npos;
    if (moe) c.ep = *rc::gen::element(1, 2);
    if (c.ep > c.tp * c.dp) c.ep = 1;
    c.optimizer.sync = GradSync::Megatron;
    c.optimizer.bucket_elements = 1e18;
    c.optimizer.distributed = *rc::gen::arbitrary<bool>();
    c.optimizer.overlap_grad_reduce = *rc::gen::arbitrary<bool>();
    c.optimizer.overlap_param_gather =
        c.optimizer.distributed && c.optimizer.overlap_grad_reduce && *rc::gen::arbitrary<bool>();
    Plan plan;
    ParallelConfig plain = c;
    plain.optimizer.distributed = plain.optimizer.overlap_grad_reduce = plain.optimizer.overlap_param_gather = false;
    Plan base;
    try {
      plan = make_plan(pattern, c, options(false, false));
      base = make_plan(pattern, plain, options(false, false));
    } catch (const ScheduleError& e) {
      RC_LOG() << e.what() << "\n";
      RC_DISCARD("refused");
    }
    const int dense_group = c.dp * c.cp, expert_group = c.tp * c.cp * c.dp / (c.etp * c.ep);
    RC_LOG() << pattern << " tp " << c.tp << " dp " << c.dp << " pp " << pp << " vpp " << vpp << " ep " << c.ep
             << " distributed " << c.optimizer.distributed << " overlap reduce " << c.optimizer.overlap_grad_reduce
             << " gather " << c.optimizer.overlap_param_gather << "\n";
    for (int r = 0; r < c.global_ranks(); ++r) {
      const int p = r / (c.tp * c.cp * c.dp);
      int buckets = 0;
      for (int v = 0; v < std::max(vpp, 1); ++v) {  // chunk v of pipeline rank p is segment v x pp + p
        buckets += dense_group >= 2;
        buckets += expert_group >= 2 && parts[static_cast<std::size_t>(v * pp + p)].find('E') != std::string::npos;
      }
      int reduces = 0, gathers = 0, tp_reduces = 0, steps = 0, first_compute = -1;
      std::multiset<std::pair<int, int>> work, base_work;  // (slot, phase) of everything else
      const auto& issue = plan.ranks.at(static_cast<std::size_t>(r)).issue;
      for (std::size_t i = 0; i < issue.size(); ++i) {
        const Node& n = plan.node(issue[i]);
        if (n.slot == Slot::GradAllReduce && n.symbols == "tp_replicated") {
          ++tp_reduces;
        } else if (n.slot == Slot::GradAllReduce) {
          ++reduces;
          const CollectiveKind want = c.optimizer.distributed ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
          RC_ASSERT(plan.collectives.at(static_cast<std::size_t>(n.collective)).kind == want);
          if (c.optimizer.overlap_grad_reduce) {  // the last microbatch's gradients of its layers
            RC_ASSERT(!n.deps.empty());
            for (int dep : n.deps) {
              RC_ASSERT(plan.node(dep).microbatch == c.microbatches - 1);
              const bool gradient = plan.node(dep).phase == Phase::Backward || plan.node(dep).phase == Phase::Weight;
              RC_ASSERT(gradient);
            }
          } else {  // the end of every chain: each microbatch of each model chunk
            RC_ASSERT(n.deps.size() == static_cast<std::size_t>(c.microbatches * std::max(vpp, 1)));
          }
        } else if (n.slot == Slot::ParamGather) {
          ++gathers;
          const bool after_step = n.deps.size() == 1 && plan.node(n.deps[0]).slot == Slot::OptimizerStep;
          const bool placed = c.optimizer.overlap_param_gather ? n.deps.empty() : after_step;
          RC_ASSERT(placed);
        } else if (n.slot == Slot::OptimizerStep) {
          ++steps;
        } else {
          work.insert({static_cast<int>(n.slot), static_cast<int>(n.phase)});
          if (n.stream == Stream::Compute && first_compute < 0) first_compute = static_cast<int>(i);
        }
      }
      for (int id : base.ranks.at(static_cast<std::size_t>(r)).issue) {
        const Node& n = base.node(id);
        if (n.slot != Slot::GradAllReduce && n.slot != Slot::ParamGather && n.slot != Slot::OptimizerStep)
          base_work.insert({static_cast<int>(n.slot), static_cast<int>(n.phase)});
      }
      RC_LOG() << "rank " << r << ": reduces " << reduces << " gathers " << gathers << " (buckets " << buckets << ")\n";
      RC_ASSERT(reduces == buckets);
      RC_ASSERT(gathers == (c.optimizer.distributed ? buckets : 0));
      RC_ASSERT(tp_reduces == (c.tp > 1 ? 1 : 0));
      RC_ASSERT(steps == 1);
      RC_ASSERT(work == base_work);
      // Overlapped gathers are issued before any compute; the whole-backward reductions after it.
      if (c.optimizer.overlap_param_gather && gathers > 0) {
        int last_gather = -1;
        for (std::size_t i = 0; i < issue.size(); ++i)
          if (plan.node(issue[i]).slot == Slot::ParamGather) last_gather = static_cast<int>(i);
        RC_ASSERT(last_gather < first_compute);
      }
    }
  });
}
