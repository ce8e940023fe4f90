// Symmetry folding after the fact (see fold.hpp).
#include "ht/schedule/fold.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace ht::schedule {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 of the running hash and the value.
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h += 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

std::uint64_t bits(double d) {
  std::uint64_t u = 0;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// What a node does, independent of which rank runs it: everything but ids, ranks and peers.
// Dependencies count by their distance in the rank's issue order (same-rank) or as "another
// rank's node" (pipeline receives).
std::uint64_t node_signature(const Plan& plan, const Node& n, int position, const std::vector<int>& position_of) {
  std::uint64_t h = 0x1234567ULL;
  for (std::uint64_t v : {std::uint64_t(n.stream), std::uint64_t(n.slot), std::uint64_t(n.phase), std::uint64_t(n.part),
                          std::uint64_t(std::int64_t(n.microbatch)), std::uint64_t(n.vp_stage),
                          std::uint64_t(std::int64_t(n.layer)), std::uint64_t(n.mtp), bits(n.flops), bits(n.mem_bytes),
                          std::uint64_t(std::int64_t(n.work))})
    h = mix(h, v);
  for (char c : n.symbols) h = mix(h, std::uint64_t(c));
  if (n.collective >= 0) {
    const auto& c = plan.collectives[static_cast<std::size_t>(n.collective)];
    h = mix(h, 0xc0 + std::uint64_t(c.kind));
    h = mix(h, std::uint64_t(c.group));
    h = mix(h, c.nodes.size());
  }
  std::vector<std::uint64_t> sends;
  for (const auto& t : n.sends)
    if (t.peer != n.rank) sends.push_back(bits(t.bytes));
  std::sort(sends.begin(), sends.end());
  h = mix(h, sends.size());
  for (auto s : sends) h = mix(h, s);
  for (int d : n.deps) {
    const Node& dep = plan.nodes[static_cast<std::size_t>(d)];
    h = mix(h, dep.rank == n.rank ? std::uint64_t(position - position_of[static_cast<std::size_t>(d)]) : 0xfeedULL);
  }
  return h;
}

// A group of `size` ranks `stride` apart lies on nodes of `per_node` GPUs the same way for every
// group of its kind: inside a node with the groups tiling it, or over whole nodes evenly.
bool aligned(long long stride, long long size, long long per_node) {
  if (size <= 1) return true;
  const long long span = stride * size;
  if (span <= per_node) return per_node % span == 0;
  if (stride >= per_node) return stride % per_node == 0;
  return per_node % stride == 0 && span % per_node == 0;
}

}  // namespace

FoldPlacement fold_placement(const ScheduleOptions& options) {
  return {options.nvlink_domain, options.uniform_fabric, options.full_bisection};
}

LayoutSizes layout_sizes(const ParallelConfig& c) { return {c.tp, c.cp, c.dp, c.pp, c.ep, c.etp}; }
LayoutSizes layout_sizes(const Plan& p) { return {p.tp, p.cp, p.dp, p.pp, p.ep, p.etp}; }

bool folding_exact(const LayoutSizes& l, const FoldPlacement& placement, bool skewed_routing) {
  if (!placement.uniform_fabric || placement.gpus_per_node < 1) return false;
  if (skewed_routing && !placement.full_bisection) return false;
  const long long g = placement.gpus_per_node;
  const long long world = l.tp * l.cp * l.dp * l.pp;
  if (world <= g) return true;  // one node: every pair meets on NVLink
  if (world % g != 0) return false;
  const long long inner = l.tp * l.cp * l.dp;
  const long long edp = l.ep * l.etp > 0 && inner % (l.ep * l.etp) == 0 ? inner / (l.ep * l.etp) : 0;
  return edp > 0 && aligned(1, l.tp, g) && aligned(l.tp, l.cp, g) && aligned(l.tp, l.cp * l.dp, g) &&
         aligned(inner, l.pp, g) && aligned(1, l.etp, g) && aligned(l.etp, l.ep, g) && aligned(l.etp * l.ep, edp, g);
}

bool builds_folded(const ParallelConfig& config, const ScheduleOptions& options) {
  const bool skewed = options.routing_skew != 0 && config.ep > 1;
  return options.fold && config.stage_ranks() > 1 &&
         folding_exact(layout_sizes(config), fold_placement(options), skewed);
}

std::optional<Plan> fold_plan(const Plan& plan) {
  if (plan.folded()) return std::nullopt;
  const int world = plan.global_ranks();
  if (world < 2) return std::nullopt;
  std::vector<int> position_of(plan.nodes.size(), 0);
  for (const auto& rp : plan.ranks)
    for (std::size_t i = 0; i < rp.issue.size(); ++i) position_of[static_cast<std::size_t>(rp.issue[i])] = static_cast<int>(i);
  // Ranks' signatures: the hash of their node signatures, and the list itself to compare.
  std::vector<std::vector<std::uint64_t>> signature(static_cast<std::size_t>(world));
  std::vector<std::uint64_t> digest(static_cast<std::size_t>(world), 0);
  for (const auto& rp : plan.ranks) {
    auto& sig = signature[static_cast<std::size_t>(rp.rank)];
    sig.reserve(rp.issue.size());
    std::uint64_t h = rp.issue.size();
    for (std::size_t i = 0; i < rp.issue.size(); ++i) {
      const std::uint64_t s = node_signature(plan, plan.node(rp.issue[i]), static_cast<int>(i), position_of);
      sig.push_back(s);
      h = mix(h, s);
    }
    digest[static_cast<std::size_t>(rp.rank)] = h;
  }
  // Classes: equal signatures; the representative is the lowest rank.
  std::vector<int> rep_of(static_cast<std::size_t>(world), -1);
  std::unordered_map<std::uint64_t, std::vector<int>> by_digest;
  for (int r = 0; r < world; ++r) by_digest[digest[static_cast<std::size_t>(r)]].push_back(r);
  int classes = 0;
  for (int r = 0; r < world; ++r) {
    if (rep_of[static_cast<std::size_t>(r)] >= 0) continue;
    rep_of[static_cast<std::size_t>(r)] = r;
    ++classes;
    for (int o : by_digest[digest[static_cast<std::size_t>(r)]])
      if (o > r && rep_of[static_cast<std::size_t>(o)] < 0 &&
          signature[static_cast<std::size_t>(o)] == signature[static_cast<std::size_t>(r)])
        rep_of[static_cast<std::size_t>(o)] = r;
  }
  if (classes == world) return std::nullopt;
  auto is_rep = [&](int r) { return rep_of[static_cast<std::size_t>(r)] == r; };
  // Exactness: a pipeline transfer joins two representatives or two folded ranks; a rendezvous
  // holds, for every folded member, the representative of its class.
  for (const auto& c : plan.collectives) {
    std::vector<int> ranks;
    for (int m : c.nodes) ranks.push_back(plan.nodes[static_cast<std::size_t>(m)].rank);
    if (c.kind == CollectiveKind::PointToPoint) {
      const bool a = is_rep(ranks.front());
      for (int r : ranks)
        if (is_rep(r) != a) return std::nullopt;
      continue;
    }
    bool any_rep = false;
    for (int r : ranks) any_rep = any_rep || is_rep(r);
    if (!any_rep) continue;
    for (int r : ranks)
      if (std::find(ranks.begin(), ranks.end(), rep_of[static_cast<std::size_t>(r)]) == ranks.end()) return std::nullopt;
  }
  for (const Node& n : plan.nodes) {
    if (!is_rep(n.rank)) continue;
    for (int d : n.deps)
      if (!is_rep(plan.nodes[static_cast<std::size_t>(d)].rank)) return std::nullopt;
  }

  std::vector<int> plan_rank(static_cast<std::size_t>(world), -1);
  // Everything but the ranks, nodes and collectives is the plan's (pattern, sizes, works, flags).
  Plan p = plan;
  p.ranks.clear();
  p.nodes.clear();
  p.collectives.clear();
  p.world = world;
  for (int r = 0; r < world; ++r)
    if (is_rep(r)) {
      plan_rank[static_cast<std::size_t>(r)] = static_cast<int>(p.ranks.size());
      RankPlan sub = plan.ranks[static_cast<std::size_t>(r)];
      sub.rank = static_cast<int>(p.ranks.size());
      sub.original = r;
      sub.stands_for = 0;
      p.ranks.push_back(std::move(sub));
    }
  for (int r = 0; r < world; ++r)
    ++p.ranks[static_cast<std::size_t>(plan_rank[static_cast<std::size_t>(rep_of[static_cast<std::size_t>(r)])])].stands_for;
  // Nodes of representatives, renumbered in the original order.
  std::vector<int> new_id(plan.nodes.size(), -1);
  for (const Node& n : plan.nodes) {
    if (!is_rep(n.rank)) continue;
    new_id[static_cast<std::size_t>(n.id)] = static_cast<int>(p.nodes.size());
    Node copy = n;
    copy.id = static_cast<int>(p.nodes.size());
    copy.rank = plan_rank[static_cast<std::size_t>(n.rank)];
    copy.collective = -1;
    p.nodes.push_back(std::move(copy));
  }
  for (Node& n : p.nodes)
    for (int& d : n.deps) d = new_id[static_cast<std::size_t>(d)];
  for (const auto& c : plan.collectives) {
    Collective sub{static_cast<int>(p.collectives.size()), c.kind, c.group, {}, {}};
    for (int m : c.nodes) {
      // A kept pipeline transfer joins two representatives: its nodes name both ranks.
      if (c.kind != CollectiveKind::PointToPoint) sub.ranks.push_back(plan.nodes[static_cast<std::size_t>(m)].rank);
      if (new_id[static_cast<std::size_t>(m)] >= 0) sub.nodes.push_back(new_id[static_cast<std::size_t>(m)]);
    }
    if (sub.nodes.empty()) continue;
    for (int m : sub.nodes) p.nodes[static_cast<std::size_t>(m)].collective = sub.id;
    p.collectives.push_back(std::move(sub));
  }
  for (RankPlan& rp : p.ranks)
    for (int& id : rp.issue) id = new_id[static_cast<std::size_t>(id)];
  return p;
}

}  // namespace ht::schedule
