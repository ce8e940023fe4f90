// From (pattern, model dims, parallel config, options) to the schedule plan of every rank
// (reference section 3): layer plans per logical layer and microbatch, issued in the order of the
// chosen schedule, with pipeline p2p, EP all-to-alls, the gradient all-reduce, dependencies and
// costs. The only entry point the engine and the twin need.
#pragma once

#include <string_view>
#include <vector>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// Schedules (Plan::schedule):
//  - "sequential" without overlap: F then B of each microbatch; PP > 1 runs Megatron's 1F1B
//    (interleaved when vpp is set) without combining forward and backward;
//  - "combined_1f1b" with overlap and PP = 1: F of mb 0 alone, then F of mb k combined with B of
//    mb k-1 layer by layer in the 13-step order of section 3.6, then B of the last mb alone;
//  - "interleaved_1f1b" with overlap and PP > 1: virtual stages with one extra warm-up
//    microbatch; every steady step is a combined forward/backward of two chunks.
// Throws ScheduleError for the rejections of reference section 4 (O1, O2, O3, O7, O8, O10) and
// bad sizes, patterns::PatternError when the pattern cannot be allocated to the stages.
Plan build_plan(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                const ParallelConfig& config, const ScheduleOptions& options);

// The checks build_plan runs before building anything (same exceptions).
void check_schedule_config(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                           const ParallelConfig& config, const ScheduleOptions& options);

// The layout ranks build_plan builds: every rank, or with ScheduleOptions::fold the
// representatives of the layout's symmetry classes (fold.hpp), with how many ranks each stands for.
struct BuiltRank {
  int rank = 0;
  int stands_for = 1;
};
std::vector<BuiltRank> built_ranks(const ParallelConfig& config, const ScheduleOptions& options);

// "sequential", "combined_1f1b" or "interleaved_1f1b" for these settings.
std::string_view schedule_name(const ParallelConfig& config, const ScheduleOptions& options);

}  // namespace ht::schedule
