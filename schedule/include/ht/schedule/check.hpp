// Invariant checks of a plan (reference section 5.2), independent of how the plan was built:
// the JSON reader runs the structural check on every file, the tests run both on every plan.
#pragma once

#include <string>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// Ids equal indices, every reference is in range, every node is issued exactly once by its own
// rank, collectives list each member once and the member names the collective back. Throws
// ScheduleError (BadPlan) naming the first offending node.
void check_plan_structure(const Plan& plan);

// Whether every node can run: stream order + deps + rendezvous of all-to-all and all-reduce
// collectives (all members start together) form no cycle. Returns "" when executable, otherwise a
// description of the nodes that can never start. Assumes check_plan_structure passed.
std::string find_deadlock(const Plan& plan);

// What a plan uses beyond what the engines' executors run -- tensor, context or expert-tensor
// parallelism, Megatron's DDP gradient sync, recomputation -- as one sentence, or "" when nothing.
// Such plans are the twin's what-ifs; the executors refuse them with this sentence.
std::string beyond_engines(const Plan& plan);

}  // namespace ht::schedule
