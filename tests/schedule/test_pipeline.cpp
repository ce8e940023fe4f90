// Pipeline schedules: warm-up counts after Megatron's get_pp_rank_microbatches, the virtual
// microbatch table, and the p2p wiring of an interleaved PP=2, VPP=2 plan, all hand-computed.
#include <catch2/catch.hpp>

#include <set>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/pipeline_order.hpp"
#include "ht/schedule/summary.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

TEST_CASE("warm-up microbatches follow Megatron's formula, plus one when overlapping",
          "[schedule][pipeline]") {
  const ParallelConfig c = parallel(2, 2, 4, 2, 2);  // pp 2, vpp 2, 4 microbatches: 8 chunks
  // rank 0: 2*(2-0-1) + (2-1)*2 = 4; rank 1: 0 + 2 = 2.
  CHECK(warmup_microbatches(c, 0, false) == 4);
  CHECK(warmup_microbatches(c, 1, false) == 2);
  CHECK(warmup_microbatches(c, 0, true) == 5);
  CHECK(warmup_microbatches(c, 1, true) == 3);
  // No virtual stages: pp - rank - 1.
  const ParallelConfig plain = parallel(1, 1, 6, 4);
  CHECK(warmup_microbatches(plain, 0, false) == 3);
  CHECK(warmup_microbatches(plain, 3, false) == 0);
  // Capped at the rank's total.
  CHECK(warmup_microbatches(parallel(2, 2, 2, 2, 2), 0, true) == 4);
  // PP = 1: one forward before the first combined step.
  CHECK(warmup_microbatches(parallel(2, 2, 5), 0, true) == 1);
}

TEST_CASE("virtual microbatches walk groups of pp through the chunks", "[schedule][pipeline]") {
  const ParallelConfig c = parallel(2, 2, 4, 2, 2);
  const std::vector<ChunkRef> fwd = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {2, 0}, {3, 0}, {2, 1}, {3, 1}};
  const std::vector<ChunkRef> bwd = {{0, 1}, {1, 1}, {0, 0}, {1, 0}, {2, 1}, {3, 1}, {2, 0}, {3, 0}};
  for (int k = 0; k < 8; ++k) {
    CHECK(forward_chunk(c, k) == fwd[static_cast<std::size_t>(k)]);
    CHECK(backward_chunk(c, k) == bwd[static_cast<std::size_t>(k)]);
  }
}

TEST_CASE("interleaved 1F1B steps of pp rank 1 with overlap", "[schedule][pipeline]") {
  const ParallelConfig c = parallel(2, 2, 4, 2, 2);
  using S = PipelineStep;
  const std::vector<S> expected = {
      {ChunkRef{0, 0}, std::nullopt}, {ChunkRef{1, 0}, std::nullopt}, {ChunkRef{0, 1}, std::nullopt},
      {ChunkRef{1, 1}, ChunkRef{0, 1}}, {ChunkRef{2, 0}, ChunkRef{1, 1}},
      {ChunkRef{3, 0}, ChunkRef{0, 0}}, {ChunkRef{2, 1}, ChunkRef{1, 0}},
      {ChunkRef{3, 1}, ChunkRef{2, 1}},
      {std::nullopt, ChunkRef{3, 1}}, {std::nullopt, ChunkRef{2, 0}}, {std::nullopt, ChunkRef{3, 0}},
  };
  CHECK(pipeline_steps(c, 1, true) == expected);
}

TEST_CASE("plain 1F1B without virtual stages: pp - rank - 1 warm-up forwards",
          "[schedule][pipeline]") {
  const ParallelConfig c = parallel(1, 1, 3, 2);
  using S = PipelineStep;
  auto f = [](int mb) { return S{ChunkRef{mb, 0}, std::nullopt}; };
  auto b = [](int mb) { return S{std::nullopt, ChunkRef{mb, 0}}; };
  CHECK(pipeline_steps(c, 0, false) == std::vector<S>{f(0), f(1), b(0), f(2), b(1), b(2)});
  CHECK(pipeline_steps(c, 1, false) == std::vector<S>{f(0), b(0), f(1), b(1), f(2), b(2)});
}

TEST_CASE("the comm stream of an interleaved rank holds p2p and all-to-alls in issue order",
          "[schedule][pipeline]") {
  const Plan plan = make_plan("[*E]|M|[*E]|-", parallel(2, 2, 2, 2, 2), options(true, false));
  for (const RankPlan& rp : plan.ranks) {
    const auto comm = stream_order(plan, rp.rank, Stream::Comm);
    const auto compute = stream_order(plan, rp.rank, Stream::Compute);
    CHECK(comm.size() + compute.size() == rp.issue.size());
    CHECK(std::is_sorted(comm.begin(), comm.end()));  // ids follow issue order within a rank
    for (int id : comm) CHECK(plan.node(id).stream == Stream::Comm);
  }
  // pp rank 1 holds "M" and "-": no all-to-all at all, only p2p and the all-reduce.
  for (int id : stream_order(plan, 2, Stream::Comm)) {
    const Slot s = plan.node(id).slot;
    CHECK((s == Slot::PipeSend || s == Slot::PipeRecv || s == Slot::GradAllReduce));
  }
}

namespace {

// Forward chunks whose every node is issued before the rank's first backward node.
int forwards_before_first_backward(const Plan& plan, int rank) {
  const auto& issue = plan.ranks[static_cast<std::size_t>(rank)].issue;
  std::size_t first_b = issue.size();
  for (std::size_t i = 0; i < issue.size(); ++i)
    if (plan.node(issue[i]).phase != Phase::Forward) {
      first_b = i;
      break;
    }
  std::set<std::pair<int, int>> started, unfinished;
  for (std::size_t i = 0; i < issue.size(); ++i) {
    const Node& n = plan.node(issue[i]);
    if (n.phase != Phase::Forward || n.microbatch < 0) continue;
    (i < first_b ? started : unfinished).insert({n.microbatch, n.vp_stage});
  }
  int complete = 0;
  for (const auto& c : started) complete += unfinished.count(c) ? 0 : 1;
  return complete;
}

}  // namespace

TEST_CASE("an interleaved PP=2 VPP=2 plan runs the warm-up forwards before its first backward",
          "[schedule][pipeline]") {
  const std::string pattern = "[*E]|[*E]|[*E]|M[*E]";
  // With overlap the forward of the first steady step is combined with the first backward, so
  // exactly the warm-up forwards finish before it; without overlap the steady forward also does.
  const Plan overlap = make_plan(pattern, parallel(2, 2, 4, 2, 2), options(true, true));
  CHECK(overlap.schedule == "interleaved_1f1b");
  CHECK(forwards_before_first_backward(overlap, 0) == 5);  // pp rank 0, dp rank 0
  CHECK(forwards_before_first_backward(overlap, 2) == 3);  // pp rank 1
  const Plan plain = make_plan(pattern, parallel(2, 2, 4, 2, 2), options(false, false));
  CHECK(plain.schedule == "sequential");
  CHECK(forwards_before_first_backward(plain, 0) == 4 + 1);
  CHECK(forwards_before_first_backward(plain, 2) == 2 + 1);
  CHECK(find_deadlock(overlap).empty());
  CHECK(find_deadlock(plain).empty());
}

TEST_CASE("pipeline sends and receives pair across stages and virtual stages",
          "[schedule][pipeline]") {
  const Plan plan = make_plan("[*E]|[*E]|[*E]|[*E]", parallel(2, 2, 4, 2, 2), options(true, true));
  int pairs = 0;
  for (const Collective& col : plan.collectives) {
    if (col.kind != CollectiveKind::PointToPoint) continue;
    ++pairs;
    REQUIRE(col.nodes.size() == 2);
    const Node& send = plan.node(col.nodes[0]);
    const Node& recv = plan.node(col.nodes[1]);
    CHECK(send.slot == Slot::PipeSend);
    CHECK(recv.slot == Slot::PipeRecv);
    CHECK(send.phase == recv.phase);
    CHECK(send.microbatch == recv.microbatch);
    CHECK(std::find(recv.deps.begin(), recv.deps.end(), send.id) != recv.deps.end());
    REQUIRE(send.sends.size() == 1);
    CHECK(send.sends[0].peer == recv.rank);
    // Same dp rank, neighbouring stage in model order (stage = vp * pp + pp_rank).
    CHECK(send.rank % 2 == recv.rank % 2);
    const int send_stage = send.vp_stage * 2 + send.rank / 2;
    const int recv_stage = recv.vp_stage * 2 + recv.rank / 2;
    CHECK(recv_stage - send_stage == (send.phase == Phase::Forward ? 1 : -1));
    CHECK(send.sends[0].bytes == 2.0 * 32 * 64 * 2);  // micro_batch * seq * hidden * bf16
  }
  // 4 stages: 3 boundaries x 2 directions x 4 microbatches x 2 dp ranks.
  CHECK(pairs == 3 * 2 * 4 * 2);
  // Pre/post-process only on the first/last model stage.
  const auto c0 = count_nodes(plan, 0), c3 = count_nodes(plan, 3);
  CHECK(count(c0, Slot::PreProcess, Phase::Forward) == 4);
  CHECK(count(c0, Slot::PostProcess, Phase::Forward) == 0);
  CHECK(count(c3, Slot::PostProcess, Phase::Forward) == 4);
  CHECK(count(c3, Slot::PreProcess, Phase::Forward) == 0);
}
