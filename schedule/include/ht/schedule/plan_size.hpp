// How big a plan will be, estimated from the settings before anything is built, so that a layout
// no machine can hold (--microbatches 100000000, --dp 1000000, a 100,000-layer pattern, --ep 65536)
// is refused at once with the limit in the message instead of filling memory for minutes. The
// estimate is an upper bound of the same order as the built plan (every slot of every layer, in
// every phase, on every rank and microbatch); the limits are what the twin replays in minutes
// and a few GiB on one machine.
#pragma once

#include <cstdint>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"

namespace ht::schedule {

struct PlanSize {
  double nodes = 0;      // compute and comm nodes over all ranks
  double transfers = 0;  // entries of the all-to-all send lists (ep - 1 per all-to-all node)
};

inline constexpr double kMaxPlanNodes = 4e6;
inline constexpr double kMaxPlanTransfers = 64e6;
// Global ranks of one plan: 2^19 = 524,288, more than twice the largest cluster built so far;
// folded (fold.hpp) a plan of any size up to it replays in seconds.
inline constexpr std::int64_t kMaxPlanRanks = 1 << 19;

// `built` ranks of the layout's are built (folded plans, build.hpp built_ranks); 0 = all of them.
PlanSize estimate_plan_size(const patterns::ParsedPattern& pattern, const ParallelConfig& config, double built = 0);
// Throws ScheduleError(BadConfig) naming the estimate, the limit and the knobs that drive it.
void check_plan_size(const patterns::ParsedPattern& pattern, const ParallelConfig& config, double built = 0);

}  // namespace ht::schedule
