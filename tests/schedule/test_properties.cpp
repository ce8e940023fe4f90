// Properties over generated patterns and configurations (rapidcheck): every plan is well formed,
// can run to completion (no cycle through stream order, deps and collective rendezvous), chains
// every microbatch chunk, pairs F/B/W nodes, keeps EP groups in lock step, is deterministic, and
// survives the JSON round trip byte for byte.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "helpers.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/memory.hpp"
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

// Activation offloading changes what crosses the host link and nothing else: the same nodes, in
// the same order, with the same dependencies, FLOPs and bytes; every byte copied out in a forward
// node comes back in a backward node of the same rank; copies only where the pattern has a layer
// with an offloadable module; and the plan still round-trips through JSON.
TEST_CASE("activation offloading adds host-link copies and leaves the plan's nodes as they were",
          "[schedule][property][offload]") {
  rc::prop("offloaded plan == plain plan but for host_copy kernels; D2H bytes == H2D bytes per rank", [] {
    Case c = *plan_case();
    RC_PRE(!c.config.recompute.full);
    const unsigned modules = *rc::gen::inRange(1u, 1u << 7);
    RC_PRE(!((modules & kOffloadAttnProj) && !(modules & kOffloadCoreAttn)));
    RC_PRE(!(c.config.recompute.has(kRecomputeMoe) && (modules & (kOffloadExpertFc1 | kOffloadMoeAct))));
    const Plan plain = build(c);
    c.config.offload.modules = modules;
    RC_LOG() << c.pattern << " offload " << to_string(c.config.offload) << "\n";
    const Plan off = build(c);
    RC_ASSERT(off.nodes.size() == plain.nodes.size());
    for (std::size_t i = 0; i < off.nodes.size(); ++i) {
      const Node& a = plain.nodes[i];
      const Node& b = off.nodes[i];
      RC_ASSERT(a.label() == b.label());
      RC_ASSERT(a.deps == b.deps);
      RC_ASSERT(a.flops == b.flops);
      RC_ASSERT(a.mem_bytes == b.mem_bytes);
      RC_ASSERT((a.work < 0) == (b.work < 0));
      if (b.work < 0) continue;
      // The offloaded node's kernels are the plain node's and at most one host copy.
      std::vector<Kernel> kb = off.works.at(static_cast<std::size_t>(b.work)).kernels;
      const auto copies = std::count_if(kb.begin(), kb.end(), [](const Kernel& k) { return k.kind == KernelKind::HostCopy; });
      RC_ASSERT(copies <= 1);
      if (copies == 1) {
        RC_ASSERT(b.phase == Phase::Forward || b.phase == Phase::Backward);
        kb.pop_back();
      }
      RC_ASSERT(kb == plain.works.at(static_cast<std::size_t>(a.work)).kernels);
    }
    for (const RankPlan& rp : off.ranks) {
      double out = 0, back = 0;
      for (int id : rp.issue) {
        const Node& n = off.node(id);
        if (n.work < 0) continue;
        for (const Kernel& k : off.works.at(static_cast<std::size_t>(n.work)).kernels)
          if (k.kind == KernelKind::HostCopy) (n.phase == Phase::Forward ? out : back) += k.bytes;
      }
      RC_ASSERT(std::abs(out - back) <= 1e-9 * std::max(out, 1.0));
    }
    bool offloadable = false;
    const ParallelConfig& cfg = c.config;
    const auto parsed = ht::patterns::parse(c.pattern);
    for (char s : parsed.flattened_symbols() + parsed.mtp)
      offloadable = offloadable || offloaded_elements(s, tiny_model(), cfg).total() > 0;
    double copied = 0;
    for (const Work& w : off.works)
      for (const Kernel& k : w.kernels) copied += k.kind == KernelKind::HostCopy ? k.bytes : 0;
    RC_ASSERT((copied > 0) == offloadable);
    RC_ASSERT(plan_from_json(plan_to_json(off)) == off);
  });
}
