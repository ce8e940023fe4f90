// Internal: turns the replay's per-node start/end times (seconds from the replay start; -1 for
// nodes that never ran) into the Summary and the traces::Timeline. No SimGrid here, so these
// are plain functions over the plan.
#pragma once

#include <vector>

#include "ht/schedule/plan.hpp"
#include "ht/sim/replay.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::sim::detail {

// `stands_for[r]` ranks behave as plan rank r (fold.hpp); per-GPU means are over `world` GPUs.
Summary summarize_replay(const schedule::Plan& plan, const std::vector<double>& start,
                         const std::vector<double>& end, const std::vector<int>& stands_for, int world);

// Spans carry their original rank (`original[r]` of plan rank r) as the device.
traces::Timeline build_timeline(const schedule::Plan& plan, const std::vector<double>& start,
                                const std::vector<double>& end, const std::vector<double>& wait,
                                const std::vector<int>& original);

}  // namespace ht::sim::detail
