// Internal: what one SimGrid run produces before it becomes a Summary and a Timeline -- per-node
// start/end/wait seconds from the replay start, counters, or the error that stopped it. Plain
// data so it can cross the pipe from the isolated simulation process (isolate.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ht/schedule/plan.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/platform.hpp"
#include "ht/sim/replay.hpp"

namespace ht::sim::detail {

struct RawReplay {
  std::vector<double> start, end, wait;  // per node
  std::int64_t activities = 0, flows = 0;
  std::string a2a_model;
  bool failed = false;
  SimErrorCode error = SimErrorCode::BadPlan;
  std::string message;
};

// Runs the SimGrid engine in this process (replay.cpp). Never throws for simulation problems:
// they come back in RawReplay::failed.
RawReplay simulate(const schedule::Plan& plan, const PlatformSpec& platform, const CostModel& costs,
                   const ReplayOptions& options);

// Runs simulate() in a forked child and reads its RawReplay back (isolate.cpp). Every replay then
// starts at simulated time 0 with fresh SimGrid statics, so results do not depend on what the
// process simulated before (SimGrid's clock is never reset between engines).
RawReplay simulate_isolated(const schedule::Plan& plan, const PlatformSpec& platform, const CostModel& costs,
                            const ReplayOptions& options);

}  // namespace ht::sim::detail
