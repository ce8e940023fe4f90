// Node counts and stream orders (see summary.hpp).
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

std::vector<int> stream_order(const Plan& plan, int rank, Stream stream) {
  std::vector<int> out;
  for (int id : plan.ranks.at(static_cast<std::size_t>(rank)).issue)
    if (plan.node(id).stream == stream) out.push_back(id);
  return out;
}

}  // namespace ht::schedule
