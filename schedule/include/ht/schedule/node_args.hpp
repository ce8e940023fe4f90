// The arguments every timeline span of a plan node carries, whoever ran the node: the twin's
// replay and the engine's executor write the same keys, so a measured trace and a prediction can
// be compared span by span and the twin can be calibrated from the engine's trace
// (`hybrid-twin calibrate` keys its durations by slot/phase/symbols read back from these).
#pragma once

#include <map>
#include <string>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// node, microbatch, layer, vp_stage, phase, symbols (when non-empty) and, for comm nodes, bytes
// (sent to other ranks, from the plan) or, for compute nodes, flops.
std::map<std::string, std::string> node_args(const Node& node);

// Shortest decimal text that reads back to the same double ("%.17g").
std::string format_number(double value);

}  // namespace ht::schedule
