// Small read-only views of a plan for people, tests and replayers: node counts per (slot, phase)
// and the per-stream order of a rank.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

using SlotPhaseCounts = std::map<std::pair<Slot, Phase>, int>;

// Nodes of one rank (or of the whole plan when rank < 0) per (slot, phase).
SlotPhaseCounts count_nodes(const Plan& plan, int rank = -1);
int count(const SlotPhaseCounts& counts, Slot slot, Phase phase);

// The node ids one stream of one rank runs, in order (the rank's issue order restricted to it).
std::vector<int> stream_order(const Plan& plan, int rank, Stream stream);

}  // namespace ht::schedule
