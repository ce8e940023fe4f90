// Symmetry folding (DESIGN.md "Scale comes from symmetry"): ranks whose node sequences are the
// same -- same slots, phases, costs, kernels, transfer sizes and dependency shape -- behave the
// same, so one of them (its class's lowest rank, the representative) is kept and stands for the
// others. Data-parallel replicas, EP groups under balanced routing and TP peers fold this way;
// skewed routing gives each EP rank its own class.
//
// A folded plan (Plan::folded()) keeps every representative's nodes and transfers as they were,
// peers named by the layout's ranks: a transfer to a folded rank still crosses that rank's links
// on the platform. RankPlan::original is the layout rank of each plan rank and stands_for the
// ranks it represents; Collective::ranks lists every layout rank of a rendezvous, and its nodes
// are the representatives among them. Folding applies only where it is exact by symmetry: every
// rendezvous holding a representative holds the representative of each of its members' classes,
// and a pipeline transfer joins two representatives or two folded ranks. The twin replays such a
// plan with every folded rank's traffic mirrored by its representative's (sim/replay.hpp), where
// the ranks are placed alike on the platform (folding_exact below). What a folded replay does not
// carry is the traffic folded ranks would send to a representative: a representative's pipeline
// receive then meets less all-to-all traffic on its ports than unfolded (docs/twin.md, Scale:
// folded steps up to about 1 % shorter with a pipeline, equal to rounding without one). Under
// skewed routing the same holds for a representative's traffic with folded peers of its own
// class (expert TP): it meets the other classes' all-to-all without the peers' share, up to
// 1.05e-4 of the all-to-all total and 6.3e-7 of the step on the property's layouts.
//
// Whether a plan folds is decided here and only here (builds_folded): build_plan builds the
// representatives only when ScheduleOptions::fold asks and folding is exact where the options say
// the ranks sit (layouts are symmetric by construction: one class per pipeline stage, per (stage,
// EP rank) under skewed routing), and records it in the plan (Plan::folded, stands_for); the
// twin replays what the plan records and refuses a folded plan on a platform where it would not
// be exact. fold_plan folds any plan after the fact (tests, plans read from JSON).
#pragma once

#include <optional>

#include "ht/schedule/config.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// Where the ranks sit, as far as folding cares: GPUs per node, whether every node is alike (a
// preset fabric whose GPUs compute on their own; not a platform file, not the CPU backend's shared
// cores) and whether the fabric has full bisection.
struct FoldPlacement {
  int gpus_per_node = 8;
  bool uniform_fabric = true;
  bool full_bisection = true;
};
FoldPlacement fold_placement(const ScheduleOptions& options);  // nvlink_domain, uniform_fabric, full_bisection

// The layout's group sizes (a ParallelConfig's or a Plan's).
struct LayoutSizes {
  long long tp = 1, cp = 1, dp = 1, pp = 1, ep = 1, etp = 1;
};
LayoutSizes layout_sizes(const ParallelConfig& config);
LayoutSizes layout_sizes(const Plan& plan);

// Whether a folded replay of this layout predicts the unfolded one: a uniform fabric; ranks
// placed alike (every rank group -- TP, CP, DP, PP, EP, ETP, EDP, each strided in Megatron's
// order -- lies on the nodes the same way for every group of its kind, so each rank sees the same
// local and remote peers); and, without full bisection, balanced routing (skewed senders of one
// node share its leaf unequally).
bool folding_exact(const LayoutSizes& layout, const FoldPlacement& placement, bool skewed_routing);

// The decision: build_plan builds only representatives exactly when this holds (options.fold
// asked, a stage of more than one rank, folding exact on the options' placement).
bool builds_folded(const ParallelConfig& config, const ScheduleOptions& options);

// The folded plan, or nullopt when no two ranks fold or folding would not be exact (above).
// `plan` must be unfolded and well formed.
std::optional<Plan> fold_plan(const Plan& plan);

}  // namespace ht::schedule
