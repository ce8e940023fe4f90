// Small read-only views of a plan for people and tests: node counts per (slot, phase).
#pragma once

#include <map>
#include <utility>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

using SlotPhaseCounts = std::map<std::pair<Slot, Phase>, int>;

// Nodes of one rank (or of the whole plan when rank < 0) per (slot, phase).
SlotPhaseCounts count_nodes(const Plan& plan, int rank = -1);
int count(const SlotPhaseCounts& counts, Slot slot, Phase phase);

}  // namespace ht::schedule
