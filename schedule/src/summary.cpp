// Node counts per (slot, phase) (see summary.hpp).
#include "ht/schedule/summary.hpp"

namespace ht::schedule {

SlotPhaseCounts count_nodes(const Plan& plan, int rank) {
  SlotPhaseCounts counts;
  for (const Node& n : plan.nodes)
    if (rank < 0 || n.rank == rank) ++counts[{n.slot, n.phase}];
  return counts;
}

int count(const SlotPhaseCounts& counts, Slot slot, Phase phase) {
  const auto it = counts.find({slot, phase});
  return it == counts.end() ? 0 : it->second;
}

}  // namespace ht::schedule
