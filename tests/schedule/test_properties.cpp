// Properties over generated patterns and configurations (rapidcheck): every plan is well formed,
// can run to completion (no cycle through stream order, deps and collective rendezvous), chains
// every microbatch chunk, pairs F/B/W nodes, keeps EP groups in lock step, is deterministic, and
// survives the JSON round trip byte for byte.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <map>
#include <tuple>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/plan_json.hpp"
#include "ht/verify/plan_gen.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

using Case = ht::verify::gen::PlanCase;
using ht::verify::gen::plan_case;

Plan build(const Case& c) {
  return build_plan(ht::patterns::parse(c.pattern), tiny_model(), c.config, c.options);
}

}  // namespace

TEST_CASE("generated plans are well formed and run to completion", "[schedule][property]") {
  rc::prop("structure, no deadlock, chains, F/B/W pairing, EP lock step", [] {
    const Case c = *plan_case();
    RC_LOG() << c.pattern << " ep " << c.config.ep << " dp " << c.config.dp << " pp "
             << c.config.pp << " vpp " << c.config.vpp << " mb " << c.config.microbatches
             << " overlap " << c.options.overlap << " delay " << c.options.delay_wgrad << "\n";
    RC_TAG(std::string(schedule_name(c.config, c.options)));
    const Plan plan = build(c);
    check_plan_structure(plan);
    const std::string deadlock = find_deadlock(plan);
    RC_ASSERT(deadlock == "");
    // Chain: the previous node of the same (microbatch, chunk) on the rank is a dependency;
    // every same-rank dependency was issued earlier.
    for (const RankPlan& rp : plan.ranks) {
      std::map<std::pair<int, int>, int> last;
      std::map<int, std::size_t> position;
      for (std::size_t i = 0; i < rp.issue.size(); ++i) position[rp.issue[i]] = i;
      for (int id : rp.issue) {
        const Node& n = plan.node(id);
        for (int d : n.deps)
          if (plan.node(d).rank == rp.rank) RC_ASSERT(position.at(d) < position.at(id));
        if (n.microbatch < 0) continue;
        const auto key = std::make_pair(n.microbatch, n.vp_stage);
        if (last.count(key))
          RC_ASSERT(std::find(n.deps.begin(), n.deps.end(), last[key]) != n.deps.end());
        last[key] = id;
      }
    }
    // Every forward layer slot has one backward, and one W exactly when delayed and weighted.
    std::map<std::tuple<int, int, int, int, bool, int>, std::array<int, 3>> parts;
    for (const Node& n : plan.nodes)
      if (n.layer >= 0)
        ++parts[{n.rank, n.microbatch, n.vp_stage, n.layer, n.mtp, static_cast<int>(n.slot)}]
               [static_cast<std::size_t>(n.phase)];
    for (const auto& [key, p] : parts) {
      RC_ASSERT(p[0] == 1);
      RC_ASSERT(p[1] == 1);
      RC_ASSERT(p[2] <= (c.options.delay_wgrad ? 1 : 0));
    }
    // Every microbatch chunk of every rank runs forward and backward.
    for (const RankPlan& rp : plan.ranks) {
      std::map<std::pair<int, int>, std::array<int, 3>> chunks;
      for (int id : rp.issue) {
        const Node& n = plan.node(id);
        if (n.microbatch >= 0) ++chunks[{n.microbatch, n.vp_stage}][static_cast<std::size_t>(n.phase)];
      }
      for (const auto& [key, p] : chunks) RC_ASSERT(p[0] > 0 && p[1] > 0);
    }
    // Members of an all-to-all run the same slot of the same layer and microbatch.
    for (const Collective& col : plan.collectives) {
      if (col.kind == CollectiveKind::PointToPoint) continue;  // a send and a receive
      const Node& a = plan.node(col.nodes.front());
      if (col.kind == CollectiveKind::AllToAll) RC_ASSERT(col.nodes.size() == static_cast<std::size_t>(c.config.ep));
      for (int m : col.nodes) {
        const Node& b = plan.node(m);
        RC_ASSERT(std::tie(a.slot, a.phase, a.microbatch, a.layer, a.mtp) ==
                  std::tie(b.slot, b.phase, b.microbatch, b.layer, b.mtp));
      }
    }
  });
}

TEST_CASE("generated plans are deterministic and round-trip through JSON", "[schedule][property]") {
  rc::prop("same input -> same bytes; write -> read -> equal plan and bytes", [] {
    const Case c = *plan_case();
    const Plan plan = build(c);
    const std::string text = plan_to_json(plan);
    RC_ASSERT(plan_to_json(build(c)) == text);
    const Plan back = plan_from_json(text);
    RC_ASSERT(back == plan);
    RC_ASSERT(plan_to_json(back) == text);
  });
}
