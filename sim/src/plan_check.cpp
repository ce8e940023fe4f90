// Consistency checks a plan must pass before the replay trusts its indices: a malformed plan
// (from JSON or a buggy builder) becomes one BadPlan message instead of a crash inside SimGrid.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"

namespace ht::sim {

namespace {
[[noreturn]] void fail(const std::string& message) { throw SimError(SimErrorCode::BadPlan, message); }
bool finite_non_negative(double v) { return std::isfinite(v) && v >= 0; }
}  // namespace

void validate_plan(const schedule::Plan& plan) {
  const int world = static_cast<int>(plan.ranks.size());
  const int n_nodes = static_cast<int>(plan.nodes.size());
  if (world < 1) fail("the plan has no ranks");
  for (int r = 0; r < world; ++r)
    if (plan.ranks[r].rank != r) fail("ranks[" + std::to_string(r) + "].rank is " + std::to_string(plan.ranks[r].rank));
  std::vector<int> issued(n_nodes, 0);
  for (const auto& rp : plan.ranks) {
    for (int n : rp.issue) {
      if (n < 0 || n >= n_nodes) fail("rank " + std::to_string(rp.rank) + " issues unknown node " + std::to_string(n));
      if (plan.nodes[n].rank != rp.rank)
        fail("rank " + std::to_string(rp.rank) + " issues node " + std::to_string(n) + " of rank " +
             std::to_string(plan.nodes[n].rank));
      ++issued[n];
    }
  }
  for (int i = 0; i < n_nodes; ++i) {
    const auto& node = plan.nodes[i];
    const std::string where = "node " + std::to_string(i);
    if (node.id != i) fail(where + " has id " + std::to_string(node.id));
    if (node.rank < 0 || node.rank >= world) fail(where + " has rank " + std::to_string(node.rank) + " outside 0.." + std::to_string(world - 1));
    if (issued[i] != 1) fail(where + " is issued " + std::to_string(issued[i]) + " times (expected once)");
    if (!finite_non_negative(node.flops) || !finite_non_negative(node.mem_bytes))
      fail(where + " has negative or non-finite flops/mem_bytes");
    for (int d : node.deps)
      if (d < 0 || d >= n_nodes || d == i) fail(where + " depends on invalid node " + std::to_string(d));
    for (const auto& t : node.sends) {
      if (t.peer < 0 || t.peer >= plan.layout_ranks())
        fail(where + " sends to rank " + std::to_string(t.peer) + " outside the plan");
      if (!finite_non_negative(t.bytes)) fail(where + " sends a negative or non-finite byte count");
    }
    if (node.collective >= static_cast<int>(plan.collectives.size()) || node.collective < -1)
      fail(where + " names unknown collective " + std::to_string(node.collective));
    if (!node.sends.empty() && node.collective < 0 && node.stream == schedule::Stream::Compute)
      fail(where + " runs on the compute stream and sends outside any collective");
    if (node.work < -1 || node.work >= static_cast<int>(plan.works.size()))
      fail(where + " names unknown work " + std::to_string(node.work));
  }
  std::vector<int> member_of(n_nodes, -1);
  for (int c = 0; c < static_cast<int>(plan.collectives.size()); ++c) {
    const auto& coll = plan.collectives[c];
    const std::string where = "collective " + std::to_string(c);
    if (coll.id != c) fail(where + " has id " + std::to_string(coll.id));
    if (coll.nodes.empty()) fail(where + " has no members");
    if (!coll.ranks.empty() && !plan.folded()) fail(where + " lists layout ranks in an unfolded plan");
    for (int r : coll.ranks)
      if (r < 0 || r >= plan.layout_ranks()) fail(where + " names layout rank " + std::to_string(r));
    // Sorted copies, so that a collective of a large data-parallel group checks in n log n.
    std::vector<int> ranks_seen;
    for (int n : coll.nodes) {
      if (n < 0 || n >= n_nodes) fail(where + " lists unknown node " + std::to_string(n));
      if (plan.nodes[n].collective != c)
        fail(where + " lists node " + std::to_string(n) + " which names collective " + std::to_string(plan.nodes[n].collective));
      if (member_of[n] != -1) fail("node " + std::to_string(n) + " is listed twice in collectives");
      member_of[n] = c;
      ranks_seen.push_back(plan.original_rank(plan.nodes[n].rank));
    }
    std::sort(ranks_seen.begin(), ranks_seen.end());
    const auto twice = std::adjacent_find(ranks_seen.begin(), ranks_seen.end());
    if (twice != ranks_seen.end()) fail(where + " has two members on rank " + std::to_string(*twice));
    std::vector<int> members = coll.ranks.empty() ? ranks_seen : coll.ranks;
    std::sort(members.begin(), members.end());
    auto is_member = [&](int r) { return std::binary_search(members.begin(), members.end(), r); };
    for (int r : ranks_seen)
      if (!is_member(r)) fail(where + " has a member on rank " + std::to_string(r) + " outside its layout ranks");
    for (int n : coll.nodes)
      for (const auto& t : plan.nodes[n].sends)
        if (!is_member(t.peer))
          fail("node " + std::to_string(n) + " of " + where + " sends to rank " + std::to_string(t.peer) +
               " which is not a member");
  }
  for (int i = 0; i < n_nodes; ++i)
    if (plan.nodes[i].collective >= 0 && member_of[i] != plan.nodes[i].collective)
      fail("node " + std::to_string(i) + " names collective " + std::to_string(plan.nodes[i].collective) +
           " but is not listed in it");
}

}  // namespace ht::sim
