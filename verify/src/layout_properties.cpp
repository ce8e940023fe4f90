// Properties of plans on Megatron's full grid (megatron-parallel.md 1-6) over generated patterns
// and layouts (layout_gen.hpp): the plan is well formed and runs (structure, no deadlock), every
// collective's members are exactly one instance of its process group (the grid formulas, written
// again in group_members and checked against the rank coordinates here), the work is conserved
// (tensor and context parallelism split it, never add or drop any: total compute FLOPs equal the
// tp = cp = 1 plan's), and tp = cp = 1 plans keep one node per compute slot and phase.
#include <cmath>
#include <map>
#include <tuple>

#include "ht/schedule/build.hpp"
#include "ht/schedule/check.hpp"
#include "ht/verify/layout_gen.hpp"
#include "plan_case.hpp"
#include "property_groups.hpp"

namespace ht::verify::detail {
namespace {

using schedule::Node;
using schedule::Phase;
using schedule::Plan;
using schedule::Slot;

Case layout_json(const gen::PlanCase& c) {
  Case j = plan_case_json(c, false);
  const auto& p = c.config;
  j["tp"] = p.tp;
  j["cp"] = p.cp;
  j["etp"] = p.etp;
  j["megatron_sync"] = p.optimizer.sync == schedule::GradSync::Megatron;
  j["distributed_optimizer"] = p.optimizer.distributed;
  j["overlap_grad_reduce"] = p.optimizer.overlap_grad_reduce;
  j["overlap_param_gather"] = p.optimizer.overlap_param_gather;
  j["bucket_elements"] = p.optimizer.bucket_elements;
  j["recompute"] = schedule::to_string(p.recompute);
  return j;
}

PlanInput layout_input(const Case& c) {
  PlanInput in = input_of(c);
  auto& p = in.config;
  p.tp = c.value("tp", 1);
  p.cp = c.value("cp", 1);
  p.etp = c.value("etp", 1);
  if (c.value("megatron_sync", false)) p.optimizer.sync = schedule::GradSync::Megatron;
  p.optimizer.distributed = c.value("distributed_optimizer", false);
  p.optimizer.overlap_grad_reduce = c.value("overlap_grad_reduce", false);
  p.optimizer.overlap_param_gather = c.value("overlap_param_gather", false);
  p.optimizer.bucket_elements = c.value("bucket_elements", 0.0);
  p.recompute = schedule::parse_recompute(c.value("recompute", std::string("none")));
  return in;
}

CaseSource layout_cases(const FuzzContext& ctx) {
  if (ctx.pattern) return {std::nullopt, "layout properties generate their own patterns"};
  return {rc::gen::map(gen::layout_case(), layout_json), ""};
}

Plan build(const PlanInput& in) { return schedule::build_plan(in.pattern, in.dims, in.config, in.options); }

void check_well_formed(const Case& c) {
  const PlanInput in = layout_input(c);
  const Plan plan = build(in);
  schedule::check_plan_structure(plan);
  if (const std::string why = schedule::find_deadlock(plan); !why.empty()) fail("deadlock: " + why);
  const auto& cfg = in.config;
  for (const auto& col : plan.collectives) {
    std::vector<int> ranks;
    for (int m : col.nodes) ranks.push_back(plan.node(m).rank);
    std::sort(ranks.begin(), ranks.end());
    if (col.kind == schedule::CollectiveKind::PointToPoint) {
      // Pipeline neighbours: same tp, cp, dp coordinates, adjacent stages.
      const auto a = schedule::rank_coords(cfg, ranks.front()), b = schedule::rank_coords(cfg, ranks.back());
      if (a.tp != b.tp || a.cp != b.cp || a.dp != b.dp) fail("a pipeline transfer crosses tp/cp/dp coordinates");
      continue;
    }
    // The members are every rank that shares all coordinates but the group's own (section 1.1).
    std::vector<int> expected;
    const auto me = schedule::rank_coords(cfg, ranks.front());
    for (int r = 0; r < cfg.global_ranks(); ++r) {
      const auto k = schedule::rank_coords(cfg, r);
      bool same = k.pp == me.pp;
      switch (col.group) {
        case schedule::Group::Tp: same = same && k.cp == me.cp && k.dp == me.dp; break;
        case schedule::Group::Cp: same = same && k.tp == me.tp && k.dp == me.dp; break;
        case schedule::Group::Dp: same = same && k.tp == me.tp; break;
        case schedule::Group::Ep: same = same && k.etp == me.etp && k.edp == me.edp; break;
        case schedule::Group::Etp: same = same && k.ep == me.ep && k.edp == me.edp; break;
        case schedule::Group::Edp: same = same && k.etp == me.etp && k.ep == me.ep; break;
        case schedule::Group::Pp: same = false; break;
      }
      if (same) expected.push_back(r);
    }
    if (ranks != expected)
      fail("collective " + std::to_string(col.id) + " (" + std::string(schedule::to_string(col.group)) +
           ") has members that are not one group instance");
    for (int m : col.nodes)
      for (const auto& t : plan.node(m).sends)
        if (!std::binary_search(ranks.begin(), ranks.end(), t.peer))
          fail("node '" + plan.node(m).label() + "' sends outside its collective");
    // Members agree on what they run: same slot, phase, part, microbatch and layer.
    const Node& first = plan.node(col.nodes.front());
    for (int m : col.nodes) {
      const Node& n = plan.node(m);
      if (n.slot != first.slot || n.phase != first.phase || n.part != first.part || n.microbatch != first.microbatch ||
          n.layer != first.layer)
        fail("collective " + std::to_string(col.id) + " joins '" + first.label() + "' with '" + n.label() + "'");
    }
  }
}

// Total compute FLOPs of the layers, embedding and loss (forward, backward, weight): the work of
// the step, which tp and cp divide among more ranks and must not change.
double step_flops(const Plan& plan) {
  double total = 0;
  for (const Node& n : plan.nodes)
    if (n.stream == schedule::Stream::Compute && n.phase != Phase::Recompute && n.slot != Slot::OptimizerStep)
      total += n.flops;
  return total;
}

void check_conserves_work(const Case& c) {
  PlanInput in = layout_input(c);
  in.options.routing_skew = 0;  // skew moves expert work between ranks; its total is the same
  const double split = step_flops(build(in));
  PlanInput one = in;
  one.config.tp = one.config.cp = one.config.etp = 1;
  one.config.ep = 1;  // experts' total work does not depend on ep either
  one.options.overlap = one.options.delay_wgrad = one.options.early_attn_release = false;
  in.options.delay_wgrad = false;  // delayed wgrad moves work between B and W nodes only
  const double whole = step_flops(build(one));
  const double again = step_flops(build(in));
  if (std::abs(again - whole) > 1e-9 * whole || std::abs(split - whole) > 1e-9 * whole)
    fail("tp " + std::to_string(in.config.tp) + " x cp " + std::to_string(in.config.cp) + " plans " +
         std::to_string(split) + " FLOPs, the tp = cp = 1 plan " + std::to_string(whole));
}

void check_one_node_per_slot(const Case& c) {
  PlanInput in = layout_input(c);
  in.config.tp = in.config.cp = in.config.etp = 1;
  const Plan plan = build(in);
  std::map<std::tuple<int, int, int, int, bool, int, int>, int> count;
  for (const Node& n : plan.nodes) {
    if (n.part != schedule::Part::Main) fail("a tp = cp = 1 plan has a TP/CP collective: '" + n.label() + "'");
    if (n.stream != schedule::Stream::Compute || n.layer < 0 || n.phase == Phase::Recompute) continue;
    ++count[{n.rank, static_cast<int>(n.phase), n.microbatch, n.vp_stage, n.mtp, n.layer, static_cast<int>(n.slot)}];
  }
  for (const auto& [key, k] : count)
    if (k != 1) fail("a tp = cp = 1 plan splits a compute slot into " + std::to_string(k) + " nodes");
}

Property make(std::string name, std::string summary, void (*check)(const Case&)) {
  return Property{std::move(name), "plan", std::move(summary), layout_cases, check};
}

}  // namespace

void add_layout_properties(std::vector<Property>& out) {
  out.push_back(make("plan.layout_well_formed",
                     "TP/CP/ETP/DDP/recompute plans are well formed, run, and every collective is one group instance",
                     check_well_formed));
  out.push_back(make("plan.layout_conserves_work",
                     "tensor and context parallelism split the step's compute FLOPs without changing their total",
                     check_conserves_work));
  out.push_back(make("plan.layout_tp1_unchanged",
                     "tp = cp = 1 plans have no TP/CP collectives and one node per compute slot and phase",
                     check_one_node_per_slot));
}

}  // namespace ht::verify::detail
