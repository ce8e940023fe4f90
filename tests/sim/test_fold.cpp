// Symmetry folding (schedule/fold.hpp, the replay's folded mode) against the unfolded replay on
// generated layouts of up to 64 GPUs: TP, CP, PP with interleaving, EP, ETP, DP, overlap, skewed
// routing (where only data-parallel replicas fold), on fabrics of 2 to 8 GPUs per node; every
// field of the summary. The
// builder's folded plan equals fold_plan of the unfolded plan, and the predictions agree: to
// SimGrid's rounding without a pipeline, within kPipelineBound with one (fold.hpp says why).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/fold.hpp"
#include "ht/schedule/plan_json.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"

using namespace ht::sim;
namespace hs = ht::schedule;

namespace {

// With a pipeline, a simulated rank's pipeline receive shares its ports with inbound all-to-all
// traffic of folded senders, which a folded replay does not carry (fold.hpp); measured at most
// 0.9 % of the step on the layouts here and on the 128-GPU production what-if.
constexpr double kPipelineBound = 0.02;
// Without a pipeline the two replays differ only by SimGrid's rounding.
constexpr double kSolverBound = 1e-9;
// Under skewed routing the classes are EP ranks, and a representative's traffic with folded peers
// of its own class (expert TP) meets the hot EP rank's all-to-all on its ports without the folded
// peers' share (fold.hpp): at most 1.05e-4 of the all-to-all total and 6.3e-7 of the step over
// 3000 generated layouts (2026-12-05).
constexpr double kSkewedBound = 1e-3;

struct Layout {
  std::string pattern;
  hs::ParallelConfig parallel;
  hs::ScheduleOptions options;
  int gpus_per_node = 8;
  std::string describe() const {
    std::ostringstream o;
    o << pattern << " tp " << parallel.tp << " cp " << parallel.cp << " pp " << parallel.pp << " vpp " << parallel.vpp
      << " ep " << parallel.ep << " etp " << parallel.etp << " dp " << parallel.dp << " mb " << parallel.microbatches << " overlap "
      << options.overlap << " skew " << options.routing_skew << " gpus/node " << gpus_per_node << " sync "
      << (parallel.optimizer.sync == hs::GradSync::Megatron ? "megatron" : "end-of-step") << " distributed "
      << parallel.optimizer.distributed << " overlap reduce " << parallel.optimizer.overlap_grad_reduce << " gather "
      << parallel.optimizer.overlap_param_gather;
    return o.str();
  }
};

void showValue(const Layout& l, std::ostream& os) { os << l.describe(); }

rc::Gen<Layout> layouts() {
  return rc::gen::exec([] {
    Layout l;
    l.pattern = *rc::gen::element<std::string>("M*E", "*E*E", "[*E][ME]", "M[*E]-[ME]", "*-*-", "[ME]*E");
    auto& p = l.parallel;
    p.tp = *rc::gen::element(1, 2);
    p.cp = l.pattern.find('*') != std::string::npos ? *rc::gen::element(1, 1, 2) : 1;
    p.pp = *rc::gen::element(1, 1, 2);
    const bool moe = l.pattern.find('E') != std::string::npos;
    p.ep = moe ? *rc::gen::element(1, 2, 4, 8) : 1;
    p.etp = moe ? *rc::gen::element(1, 1, 2) : 1;
    // ep x etp must divide tp x cp x dp.
    const int inner = p.tp * p.cp;
    const int dp_unit = p.ep * p.etp / std::gcd(p.ep * p.etp, inner);
    p.dp = dp_unit * *rc::gen::inRange(1, 5);
    RC_PRE(p.tp * p.cp * p.dp * p.pp <= 64);
    RC_PRE(p.tp * p.cp * p.dp * p.pp > 1);
    l.options.overlap = moe && p.ep > 1 && *rc::gen::arbitrary<bool>();
    if (p.pp > 1 && (l.options.overlap || *rc::gen::arbitrary<bool>())) p.vpp = 1;
    p.microbatches = (p.pp > 1 ? p.pp : 1) * *rc::gen::inRange(1, 3);
    l.options.routing_skew = moe && p.ep > 1 ? *rc::gen::element(0.0, 0.0, 1.2) : 0.0;
    l.gpus_per_node = *rc::gen::element(2, 4, 8);
    // The gradient sync: the engine's end-of-step all-reduce, or Megatron's DDP on a stream of its
    // own, with or without the distributed optimizer and its overlapped reduce and gather.
    if (*rc::gen::arbitrary<bool>()) {
      auto& o = p.optimizer;
      o.sync = hs::GradSync::Megatron;
      o.distributed = *rc::gen::arbitrary<bool>();
      o.overlap_grad_reduce = *rc::gen::arbitrary<bool>();
      o.overlap_param_gather = o.distributed && o.overlap_grad_reduce && *rc::gen::arbitrary<bool>();
    }
    return l;
  });
}

PlatformSpec platform_for(const Layout& l) {
  auto p = preset("dgx-h100");
  p.gpus_per_node = l.gpus_per_node;
  return sized_for(p, l.parallel.global_ranks());
}

// Built for the layout's platform, as `simulate` builds: the builder decides whether to fold.
hs::Plan build(const Layout& l, bool fold) {
  hs::ScheduleOptions o = l.options;
  place(o, platform_for(l));
  o.fold = fold;
  return hs::build_plan(ht::patterns::parse(l.pattern), hs::tiny_model(), l.parallel, o);
}

double relative(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-12}); }

}  // namespace

TEST_CASE("a folded replay predicts what the unfolded replay does", "[sim][property][fold]") {
  rc::prop("folded == unfolded on generated layouts up to 64 GPUs", [] {
    const Layout l = *layouts();
    hs::Plan whole, built;
    try {
      whole = build(l, false);
      built = build(l, true);
    } catch (const hs::ScheduleError&) {
      RC_DISCARD("not a valid layout");
    }
    RC_TAG(l.parallel.pp > 1 ? "pipeline" : "no pipeline");
    RC_TAG(l.options.routing_skew > 0 ? "skewed" : "balanced");
    // One fold, two ways in: where fold_plan finds the builder's classes, it builds the same
    // plan. (It finds coarser ones when a stage has no skewed layer, and then gives up where
    // a pipeline transfer would join a representative to a folded rank: fold.hpp.)
    const auto after = hs::fold_plan(whole);
    if (after && after->global_ranks() == built.global_ranks()) RC_ASSERT(*after == built);
    RC_ASSERT(!after || after->global_ranks() <= built.global_ranks());
    // Skewed routing folds only replicas with the same EP rank.
    if (built.folded() && l.options.routing_skew > 0)
      RC_ASSERT(built.global_ranks() == l.parallel.pp * l.parallel.ep);
    const PlatformSpec platform = platform_for(l);
    const CostModel costs;
    const Summary u = replay(whole, platform, costs).summary;
    const bool skewed = l.options.routing_skew > 0 && l.parallel.ep > 1;
    if (!hs::folding_exact(hs::layout_sizes(whole), fold_placement(platform), skewed)) {
      // Ranks placed unlike (a partial node, a group straddling nodes): the builder builds every
      // rank, and a plan folded anyway is refused.
      RC_TAG("placed unlike: not folded");
      RC_ASSERT(!built.folded());
      if (after) RC_ASSERT_THROWS_AS(replay(*after, platform, costs), SimError);
      return;
    }
    const Summary f = replay(built, platform, costs).summary;
    const Summary g = replay(after ? *after : whole, platform, costs).summary;  // folded after the fact
    const bool skewed_etp = l.options.routing_skew > 0 && l.parallel.etp > 1;
    const double bound = l.parallel.pp > 1 ? kPipelineBound : skewed_etp ? kSkewedBound : kSolverBound;
    RC_LOG() << l.describe() << ": step " << u.step_time_s << " vs " << f.step_time_s << ", a2a exposed "
             << u.a2a_exposed_s << " vs " << f.a2a_exposed_s << ", hidden " << u.a2a_hidden_fraction << " vs "
             << f.a2a_hidden_fraction << "\n";
    RC_ASSERT(f.gpus == u.gpus);
    RC_ASSERT(relative(f.step_time_s, u.step_time_s) <= bound);
    RC_ASSERT(relative(f.a2a_total_s, u.a2a_total_s) <= bound);
    RC_ASSERT(std::abs(f.a2a_exposed_s - u.a2a_exposed_s) <= bound * u.step_time_s);
    RC_ASSERT(std::abs(f.a2a_hidden_fraction - u.a2a_hidden_fraction) <= (l.parallel.pp > 1 ? 0.05 : bound));
    RC_ASSERT(relative(f.dp_comm_s, u.dp_comm_s) <= bound);
    RC_ASSERT(relative(g.step_time_s, u.step_time_s) <= bound);
    // Every other field of the summary a user reads (issue 30 item 1): what a representative
    // adds for the ranks it stands for, and the figures taken across ranks.
    RC_ASSERT(relative(f.compute_busy_s, u.compute_busy_s) <= bound);
    RC_ASSERT(relative(f.max_compute_busy_s, u.max_compute_busy_s) <= bound);
    RC_ASSERT(relative(f.layer_compute_s, u.layer_compute_s) <= bound);
    RC_ASSERT(relative(f.p2p_total_s, u.p2p_total_s) <= bound);
    RC_ASSERT(relative(f.allreduce_s, u.allreduce_s) <= bound);
    RC_ASSERT(relative(f.tp_comm_s, u.tp_comm_s) <= bound);
    RC_ASSERT(relative(f.cp_comm_s, u.cp_comm_s) <= bound);
    RC_ASSERT(std::abs(f.dp_exposed_s - u.dp_exposed_s) <= bound * u.step_time_s);
    RC_ASSERT(relative(f.optimizer_s, u.optimizer_s) <= bound);
    RC_ASSERT(std::abs(f.bubble_fraction - u.bubble_fraction) <= bound);
  });
}

TEST_CASE("a folded plan keeps the layout's ranks and round-trips through JSON", "[sim][fold]") {
  Layout l;
  l.pattern = "M*E";
  l.parallel.ep = 4;
  l.parallel.dp = 8;
  l.parallel.pp = 2;
  l.parallel.vpp = 1;
  l.parallel.microbatches = 4;
  l.options.overlap = true;
  const hs::Plan plan = build(l, true);
  REQUIRE(plan.folded());
  REQUIRE(plan.layout_ranks() == 16);
  REQUIRE(plan.global_ranks() == 2);  // one rank per pipeline stage
  CHECK(plan.original_rank(0) == 0);
  CHECK(plan.original_rank(1) == 8);
  CHECK(plan.ranks[0].stands_for == 8);
  CHECK(plan.ranks[1].stands_for == 8);
  // Every all-to-all names its whole EP group; its one node is the representative's.
  int all_to_alls = 0;
  for (const auto& c : plan.collectives)
    if (c.kind == hs::CollectiveKind::AllToAll) {
      ++all_to_alls;
      CHECK(c.ranks.size() == 4);
      CHECK(c.nodes.size() == 1);
    }
  CHECK(all_to_alls > 0);
  hs::check_plan_structure(plan);
  CHECK(hs::plan_from_json(hs::plan_to_json(plan)) == plan);

  l.options.routing_skew = 1.2;
  const hs::Plan skewed = build(l, true);
  CHECK(skewed.global_ranks() == 8);  // one per (stage, EP rank)
  for (const auto& rp : skewed.ranks) CHECK(rp.stands_for == 2);
}

TEST_CASE("a folded plan is refused where folding is not exact", "[sim][fold]") {
  Layout l;
  l.pattern = "M*E";
  l.parallel.ep = 2;
  l.parallel.dp = 4;
  const hs::Plan plan = build(l, true);
  REQUIRE(plan.folded());
  PlatformSpec cpu = platform_for(l);
  cpu.host_cores = 2;  // the CPU backend's shared cores: every rank competes for them
  try {
    replay(plan, cpu, CostModel{});
    FAIL("a folded plan replayed on shared cores");
  } catch (const SimError& e) {
    CHECK(std::string(e.what()).find("--no-fold") != std::string::npos);
  }
  // The builder decides from the placement it is given: on shared cores, a platform file or
  // (under skewed routing) an oversubscribed fabric it builds every rank.
  Layout shared = l;
  shared.options.fold = true;
  shared.options.uniform_fabric = false;
  CHECK_FALSE(hs::builds_folded(shared.parallel, shared.options));
  CHECK_FALSE(hs::build_plan(ht::patterns::parse(l.pattern), hs::tiny_model(), l.parallel, shared.options).folded());
  hs::ScheduleOptions oversubscribed;
  oversubscribed.fold = true;
  oversubscribed.full_bisection = false;
  CHECK(hs::builds_folded(l.parallel, oversubscribed));
  oversubscribed.routing_skew = 1.2;
  CHECK_FALSE(hs::builds_folded(l.parallel, oversubscribed));
  PlatformSpec from_file = platform_for(l);
  from_file.xml_file = "cluster.xml";
  CHECK_FALSE(fold_placement(from_file).uniform_fabric);
  CHECK_FALSE(fold_placement(cpu).uniform_fabric);
  // A plan whose ranks differ does not fold.
  hs::Plan whole = build(l, false);
  for (int id : whole.ranks[3].issue)
    if (whole.nodes[static_cast<std::size_t>(id)].flops > 0) {
      whole.nodes[static_cast<std::size_t>(id)].flops *= 2;
      break;
    }
  CHECK_FALSE(hs::fold_plan(whole).has_value());
}
