// The issue order of the combined 1F1B schedule, written out by hand from reference section 3.6
// (13-step layer order, chunk level, microbatch phases) and compared node by node.
#include <catch2/catch.hpp>

#include <map>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

using Labels = std::vector<std::string>;

Labels concat(std::initializer_list<Labels> parts) {
  Labels out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Labels forward_alone(int mb, int layer) {
  const std::string p = "F mb" + std::to_string(mb) + " L" + std::to_string(layer) + " ";
  return {p + "pre_dispatch", p + "dispatch", p + "mlp", p + "combine"};
}

}  // namespace

TEST_CASE("combined 1F1B issues [*E][*E] with 2 microbatches in the 13-step order",
          "[schedule][order]") {
  const Plan plan = make_plan("[*E][*E]", parallel(2, 2, 2), options(true, true));
  const Labels expected = concat({
      // Phase 0: forward of mb 0 alone.
      {"F mb0 pre_process"},
      forward_alone(0, 0),
      forward_alone(0, 1),
      {"F mb0 post_process"},
      // Phase 1: forward of mb 1 combined with backward of mb 0 (chunk steps 1, 2).
      {"F mb1 pre_process", "B mb0 post_process"},
      // Pair 0: f = layer 0 of mb 1, b = layer 1 of mb 0 (popped first); steps 2-7, 9-11, 13.
      {"B mb0 L1 combine", "F mb1 L0 pre_dispatch", "B mb0 L1 mlp", "F mb1 L0 dispatch",
       "W mb0 L1 mlp", "B mb0 L1 dispatch", "F mb1 L0 mlp", "F mb1 L0 combine",
       "B mb0 L1 pre_dispatch", "W mb0 L1 pre_dispatch"},
      // Pair 1: b = layer 0, the last layer in backward: its pre_dispatch W is deferred.
      {"B mb0 L0 combine", "F mb1 L1 pre_dispatch", "B mb0 L0 mlp", "F mb1 L1 dispatch",
       "W mb0 L0 mlp", "B mb0 L0 dispatch", "F mb1 L1 mlp", "F mb1 L1 combine",
       "B mb0 L0 pre_dispatch"},
      // Chunk steps 6, 7: deferred W of the first model layer, loss forward, embedding backward.
      {"W mb0 L0 pre_dispatch", "F mb1 post_process", "B mb0 pre_process"},
      // Final phase: backward of mb 1 alone.
      {"B mb1 post_process", "B mb1 L1 combine", "B mb1 L1 mlp", "W mb1 L1 mlp",
       "B mb1 L1 dispatch", "B mb1 L1 pre_dispatch", "W mb1 L1 pre_dispatch", "B mb1 L0 combine",
       "B mb1 L0 mlp", "W mb1 L0 mlp", "B mb1 L0 dispatch", "B mb1 L0 pre_dispatch",
       "W mb1 L0 pre_dispatch", "B mb1 pre_process"},
      {"grad_all_reduce non_expert"},
  });
  CHECK(labels(plan, 0) == expected);
  CHECK(labels(plan, 1) == expected);
}

TEST_CASE("early attention release moves pre_dispatch backward to step 8", "[schedule][order]") {
  const Plan plan = make_plan("[*E][*E]", parallel(2, 2, 2), options(true, true, true));
  const Labels got = labels(plan, 0);
  const Labels pair0 = {"B mb0 L1 combine", "F mb1 L0 pre_dispatch", "B mb0 L1 mlp",
                        "F mb1 L0 dispatch", "W mb0 L1 mlp", "B mb0 L1 dispatch",
                        "B mb0 L1 pre_dispatch", "F mb1 L0 mlp", "F mb1 L0 combine",
                        "W mb0 L1 pre_dispatch"};
  const auto start = std::find(got.begin(), got.end(), "B mb0 post_process");
  REQUIRE(std::distance(start, got.end()) > static_cast<long>(pair0.size()));
  CHECK(Labels(start + 1, start + 1 + static_cast<long>(pair0.size())) == pair0);
}

TEST_CASE("without delayed wgrad there are no W nodes and the order is otherwise the same",
          "[schedule][order]") {
  const Plan delayed = make_plan("[*E][*E]", parallel(2, 2, 3), options(true, true));
  const Plan plain = make_plan("[*E][*E]", parallel(2, 2, 3), options(true, false));
  Labels without_w;
  for (const auto& l : labels(delayed, 0))
    if (l[0] != 'W') without_w.push_back(l);
  CHECK(labels(plain, 0) == without_w);
}

TEST_CASE("the sequential schedule runs F then B of every microbatch", "[schedule][order]") {
  const Plan plan = make_plan("M[*E]", parallel(2, 2, 2), options(false, false));
  const Labels mb0 = {"F mb0 pre_process", "F mb0 L0 pre_dispatch", "F mb0 L1 pre_dispatch",
                      "F mb0 L1 dispatch", "F mb0 L1 mlp", "F mb0 L1 combine",
                      "F mb0 post_process", "B mb0 post_process", "B mb0 L1 combine",
                      "B mb0 L1 mlp", "B mb0 L1 dispatch", "B mb0 L1 pre_dispatch",
                      "B mb0 L0 pre_dispatch", "B mb0 pre_process"};
  Labels expected = mb0;
  for (const auto& l : mb0) expected.push_back(l.substr(0, 4) + "1" + l.substr(5));
  expected.push_back("grad_all_reduce non_expert");
  CHECK(labels(plan, 0) == expected);
}

TEST_CASE("every node after the first of its microbatch chunk depends on its predecessor",
          "[schedule][order]") {
  const Plan plan = make_plan("[M*E][*-]E", parallel(2, 2, 3), options(true, true));
  for (const RankPlan& rp : plan.ranks) {
    std::map<std::pair<int, int>, int> last;
    for (int id : rp.issue) {
      const Node& n = plan.node(id);
      if (n.microbatch < 0) continue;
      const auto key = std::make_pair(n.microbatch, n.vp_stage);
      if (last.count(key)) {
        CHECK(n.deps == std::vector<int>{last[key]});  // PP = 1: nothing but the chain
      } else {
        CHECK(n.deps.empty());
      }
      last[key] = id;
    }
  }
  CHECK(find_deadlock(plan).empty());
}

TEST_CASE("the deferred W of the first layer comes after every other node of its backward",
          "[schedule][order]") {
  const Plan plan = make_plan("[M*E][*E]M", parallel(2, 2, 3), options(true, true));
  for (int mb = 0; mb < 3; ++mb) {
    int deferred = -1, last_backward_layer_node = -1;
    for (int id : plan.ranks[0].issue) {
      const Node& n = plan.node(id);
      if (n.microbatch != mb || n.layer < 0) continue;
      if (n.phase == Phase::Weight && n.slot == Slot::PreDispatch && n.layer == 0) deferred = id;
      if (n.phase != Phase::Forward && !(n.phase == Phase::Weight && n.layer == 0 && n.slot == Slot::PreDispatch))
        last_backward_layer_node = id;
    }
    REQUIRE(deferred >= 0);
    CHECK(last_backward_layer_node < deferred);
    // ... and right before pre_process backward, after the loss forward of the paired microbatch.
    const auto& issue = plan.ranks[0].issue;
    const auto pos = std::find(issue.begin(), issue.end(), deferred) - issue.begin();
    const Node& next = plan.node(issue[static_cast<std::size_t>(pos) + 1]);
    if (mb + 1 < 3) {
      CHECK(next.label() == "F mb" + std::to_string(mb + 1) + " post_process");
    } else {
      CHECK(next.label() == "B mb2 pre_process");
    }
  }
}

TEST_CASE("the deadlock finder catches collectives issued in different orders", "[schedule][order]") {
  Plan plan = make_plan("[*E][*E]", parallel(2, 2, 1), options(true, false));
  REQUIRE(find_deadlock(plan).empty());
  // Rank 1 issues its first two all-to-alls the other way round: both ranks wait forever.
  auto& issue = plan.ranks[1].issue;
  std::vector<std::size_t> comm;
  for (std::size_t i = 0; i < issue.size(); ++i)
    if (plan.node(issue[i]).stream == Stream::Comm) comm.push_back(i);
  REQUIRE(comm.size() >= 2);
  std::swap(issue[comm[0]], issue[comm[1]]);
  CHECK_THAT(find_deadlock(plan), Catch::Contains("can never start"));
}

TEST_CASE("the deadlock finder catches a dependency on a later node of the same stream",
          "[schedule][order]") {
  Plan plan = make_plan("M", parallel(1, 1, 1), options(false, false));
  const auto& issue = plan.ranks[0].issue;
  REQUIRE(issue.size() >= 3);
  plan.nodes[static_cast<std::size_t>(issue[0])].deps.push_back(issue[2]);
  CHECK_FALSE(find_deadlock(plan).empty());
}
