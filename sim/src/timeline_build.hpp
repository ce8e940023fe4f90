// Internal: turns the replay's per-node start/end times (seconds from the replay start; -1 for
// nodes that never ran) into the Summary and the traces::Timeline. No SimGrid here, so these
// are plain functions over the plan.
#pragma once

#include <vector>

#include "ht/schedule/plan.hpp"
#include "ht/sim/replay.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::sim::detail {

Summary summarize_replay(const schedule::Plan& plan, const std::vector<double>& start,
                         const std::vector<double>& end);

traces::Timeline build_timeline(const schedule::Plan& plan, const std::vector<double>& start,
                                const std::vector<double>& end, const std::vector<double>& wait);

}  // namespace ht::sim::detail
