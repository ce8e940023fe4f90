// Node counts per slot and phase for small plans counted by hand from reference section 3.2:
// "[*E][*E]" has two MoE layer plans, each with pre_dispatch, dispatch, mlp and combine; the
// first stage adds pre_process and the last post_process; delayed wgrad adds W nodes for the
// expert mlp and for the attention in pre_dispatch.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/summary.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

void require_layer_counts(const SlotPhaseCounts& c, int microbatches, int layers, bool delay) {
  for (Phase p : {Phase::Forward, Phase::Backward}) {
    CHECK(count(c, Slot::PreProcess, p) == microbatches);
    CHECK(count(c, Slot::PostProcess, p) == microbatches);
    for (Slot s : {Slot::PreDispatch, Slot::Dispatch, Slot::Mlp, Slot::Combine})
      CHECK(count(c, s, p) == microbatches * layers);
  }
  CHECK(count(c, Slot::MtpPost, Phase::Forward) == 0);
  CHECK(count(c, Slot::Mlp, Phase::Weight) == (delay ? microbatches * layers : 0));
  CHECK(count(c, Slot::PreDispatch, Phase::Weight) == (delay ? microbatches * layers : 0));
  CHECK(count(c, Slot::Dispatch, Phase::Weight) == 0);
  CHECK(count(c, Slot::Combine, Phase::Weight) == 0);
  CHECK(count(c, Slot::GradAllReduce, Phase::Backward) == 1);
}

}  // namespace

TEST_CASE("[*E][*E] with EP=2 and 3 microbatches has 20 nodes per microbatch plus W nodes",
          "[schedule][counts]") {
  for (bool overlap : {false, true}) {
    for (bool delay : {false, true}) {
      if (delay && !overlap) continue;
      CAPTURE(overlap, delay);
      const Plan plan = make_plan("[*E][*E]", parallel(2, 2, 3), options(overlap, delay));
      REQUIRE(plan.ranks.size() == 2);
      for (int r = 0; r < 2; ++r) {
        const auto c = count_nodes(plan, r);
        require_layer_counts(c, 3, 2, delay);
        // 3 x (10 F + 10 B) + all-reduce, plus 3 x 4 W nodes when delayed.
        CHECK(plan.ranks[static_cast<std::size_t>(r)].issue.size() == (delay ? 73u : 61u));
      }
      // One all-to-all per (layer, microbatch, slot, phase, EP group) + one all-reduce.
      CHECK(plan.collectives.size() == 2u * 3 * 2 * 2 + 1);
      CHECK(plan.schedule == (overlap ? "combined_1f1b" : "sequential"));
    }
  }
}

TEST_CASE("dense and mixer-only layers get no comm nodes but keep compute slots",
          "[schedule][counts]") {
  // M: pre_dispatch only; [*-]: pre_dispatch + dense mlp; E alone: pre_dispatch (router) + a2a.
  const Plan plan = make_plan("M[*-]E", parallel(1, 1, 2), options(false, false));
  const auto c = count_nodes(plan, 0);
  CHECK(count(c, Slot::PreDispatch, Phase::Forward) == 2 * 3);
  CHECK(count(c, Slot::Mlp, Phase::Forward) == 2 * 2);
  CHECK(count(c, Slot::Dispatch, Phase::Forward) == 2 * 1);
  CHECK(count(c, Slot::Combine, Phase::Backward) == 2 * 1);
  // dp = 1: nothing to all-reduce.
  CHECK(count(c, Slot::GradAllReduce, Phase::Backward) == 0);
}

TEST_CASE("a lone '-' has an mlp node and no pre_dispatch node", "[schedule][counts]") {
  const Plan plan = make_plan("-", parallel(2, 2, 1), options(true, true));
  const auto c = count_nodes(plan, 0);
  CHECK(count(c, Slot::PreDispatch, Phase::Forward) == 0);
  CHECK(count(c, Slot::Mlp, Phase::Forward) == 1);
  CHECK(count(c, Slot::Mlp, Phase::Weight) == 1);
  CHECK(count(c, Slot::Dispatch, Phase::Forward) == 0);
}

TEST_CASE("the router-only pre_dispatch of a lone E has no W node unless a shared expert exists",
          "[schedule][counts]") {
  ModelDims dims = tiny_model();
  const Plan without = make_plan("E", parallel(2, 2, 1), options(true, true), dims);
  CHECK(count(count_nodes(without, 0), Slot::PreDispatch, Phase::Weight) == 0);
  dims.shared_expert_ffn = 32;
  const Plan with = make_plan("E", parallel(2, 2, 1), options(true, true), dims);
  CHECK(count(count_nodes(with, 0), Slot::PreDispatch, Phase::Weight) == 1);
}

TEST_CASE("MTP depths add a layer plan with mtp_post on the last stage", "[schedule][counts]") {
  const Plan plan = make_plan("[*E]/*E/*E", parallel(1, 1, 2), options(false, false));
  const auto c = count_nodes(plan, 0);
  CHECK(count(c, Slot::MtpPost, Phase::Forward) == 2 * 2);
  CHECK(count(c, Slot::MtpPost, Phase::Backward) == 2 * 2);
  CHECK(count(c, Slot::PreDispatch, Phase::Forward) == 2 * 3);
  int mtp_nodes = 0;
  for (const Node& n : plan.nodes) mtp_nodes += n.mtp ? 1 : 0;
  CHECK(mtp_nodes == 2 * 2 * 2 * 5);  // mb x depth x (F, B) x (pre, dispatch, mlp, combine, post)
}

TEST_CASE("dp larger than ep adds an expert all-reduce over the EP replicas", "[schedule][counts]") {
  const Plan plan = make_plan("[*E]", parallel(2, 4, 1), options(true, false));
  CHECK(count(count_nodes(plan, 0), Slot::GradAllReduce, Phase::Backward) == 2);
  int expert_groups = 0;
  for (const Collective& col : plan.collectives) {
    if (col.kind != CollectiveKind::AllReduce) continue;
    const Node& first = plan.node(col.nodes.front());
    if (first.symbols == "expert") {
      ++expert_groups;
      REQUIRE(col.nodes.size() == 2);
      // Ranks with the same EP rank in different EP groups: {0, 2} and {1, 3}.
      CHECK(plan.node(col.nodes[1]).rank - first.rank == 2);
    } else {
      CHECK(col.nodes.size() == 4);
    }
  }
  CHECK(expert_groups == 2);
  CHECK(find_deadlock(plan).empty());
}
