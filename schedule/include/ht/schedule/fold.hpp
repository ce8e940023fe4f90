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
// the ranks are placed alike on the platform (sim::folding_exact). What a folded replay does not
// carry is the traffic folded ranks would send to a representative: a representative's pipeline
// receive then meets less all-to-all traffic on its ports than unfolded (docs/twin.md, Scale:
// folded steps up to about 1 % shorter with a pipeline, equal to rounding without one). Under
// skewed routing the same holds for a representative's traffic with folded peers of its own
// class (expert TP): it meets the other classes' all-to-all without the peers' share, up to
// 1.05e-4 of the all-to-all total and 6.3e-7 of the step on the property's layouts.
//
// Two ways in: build_plan with ScheduleOptions::fold builds the representatives only (layouts
// are symmetric by construction: one class per pipeline stage, per (stage, EP rank) under
// skewed routing), and fold_plan folds any plan after the fact (plans read from JSON).
#pragma once

#include <optional>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// The folded plan, or nullopt when no two ranks fold or folding would not be exact (above).
// `plan` must be unfolded and well formed.
std::optional<Plan> fold_plan(const Plan& plan);

}  // namespace ht::schedule
