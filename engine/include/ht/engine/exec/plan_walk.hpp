// The walk over a plan's issue orders, one piece of code for both executors: the CPU executor
// (exec/executor.cpp) and the device executor (engine/cuda/.../dev/executor.hpp, on a GPU or its
// host emulation). With it live what both check of a plan before they run it, how both read an
// expert's index out of a parameter name, and the row layout both give an expert's tokens.
//
// The walk. Ranks [lo, hi) take turns through their issue orders: a compute node goes to
// on_compute when its rank reaches it; a rendezvous collective (an all-to-all or an all-reduce,
// whose members start together) goes to on_collective, with all its members, once every member in
// [lo, hi) has reached it; a comm node that is no rendezvous (a pipeline send or receive, which
// waits only for its partner's data) goes to on_collective alone when its rank reaches it. When no
// rank of the range can move, the plan deadlocks and is refused in one line instead of hanging.
//
// Who walks what: the CPU executor walks each rank on that rank's host thread (a range of one: the
// rank's issue order as it is; its collectives meet at run time in the transport), after one walk
// over all ranks that runs nothing and refuses a deadlocking plan. The device executor walks its
// process's ranks round robin on its one host thread (after the same refusing walk when the ranks
// are split over processes) and runs each collective's copies when the walk hands it over.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/engine/error.hpp"
#include "ht/engine/exec/weight_steps.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::engine::exec {

[[noreturn]] inline void walk_fail(std::string_view who, const std::string& message) {
  throw EngineError(ErrorCode::BadConfig, std::string(who) + ": " + message);
}

// Every rank's issue order (issue_order, with the test fault), the plan's ranks checked to be
// numbered by their index.
inline std::vector<std::vector<int>> issue_orders(const schedule::Plan& plan, WeightFault fault, std::string_view who) {
  std::vector<std::vector<int>> out;
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    if (plan.ranks[r].rank != static_cast<int>(r)) walk_fail(who, "plan rank " + std::to_string(r) + " is misnumbered");
    out.push_back(issue_order(plan, static_cast<int>(r), fault));
  }
  return out;
}

// Whether the walk holds a rank at `node` until the node's fellow members arrive.
inline bool rendezvous(const schedule::Plan& plan, const schedule::Node& node) {
  return node.collective >= 0 &&
         plan.collectives.at(static_cast<std::size_t>(node.collective)).kind != schedule::CollectiveKind::PointToPoint;
}

// The walk of ranks [lo, hi) (header comment). on_compute(const Node&),
// on_collective(const std::vector<const Node*>& members).
template <class OnCompute, class OnCollective>
void walk_plan(const schedule::Plan& plan, const std::vector<std::vector<int>>& issue, int lo, int hi,
               std::string_view who, OnCompute&& on_compute, OnCollective&& on_collective) {
  const auto at = [](int r) { return static_cast<std::size_t>(r); };
  std::vector<std::size_t> pos(issue.size(), 0);
  std::map<int, std::set<int>> arrived;  // collective -> ranks waiting at it
  for (;;) {
    bool progress = false, done = true;
    for (int r = lo; r < hi; ++r) {
      const auto& order = issue.at(at(r));
      while (pos[at(r)] < order.size()) {
        const schedule::Node& node = plan.node(order[pos[at(r)]]);
        if (node.rank != r)
          walk_fail(who, "rank " + std::to_string(r) + " issues node " + node.label() + " of rank " + std::to_string(node.rank));
        if (node.stream == schedule::Stream::Compute) {
          on_compute(node);
          ++pos[at(r)];
          progress = true;
          continue;
        }
        std::vector<const schedule::Node*> members;
        if (!rendezvous(plan, node)) {
          members.push_back(&node);
        } else {
          const auto& coll = plan.collectives.at(static_cast<std::size_t>(node.collective));
          arrived[coll.id].insert(r);
          std::size_t here = 0;
          for (int id : coll.nodes) {
            members.push_back(&plan.node(id));
            here += members.back()->rank >= lo && members.back()->rank < hi;
          }
          if (arrived[coll.id].size() < here) break;  // wait for the others
          arrived.erase(coll.id);
        }
        on_collective(members);
        for (const auto* m : members)
          if (m->rank >= lo && m->rank < hi) ++pos[at(m->rank)];
        progress = true;
      }
      done &= pos[at(r)] == order.size();
    }
    if (done) return;
    if (!progress) walk_fail(who, "deadlock: the ranks wait at collectives the others never reach");
  }
}

// The walk over every rank that runs nothing: refuses a plan whose ranks would deadlock.
inline void refuse_deadlock(const schedule::Plan& plan, const std::vector<std::vector<int>>& issue, std::string_view who) {
  walk_plan(plan, issue, 0, static_cast<int>(issue.size()), who, [](const schedule::Node&) {},
            [](const std::vector<const schedule::Node*>&) {});
}

// Which of a rank's nodes builds and which releases each (microbatch, chunk, layer) state, and
// after which a chunk's own tensors (hidden state, logits, loss caches) go: the first and the last
// of their nodes in the rank's issue order, counted by position (an issue order may hold a node
// twice: the test faults). Both executors act on it where the node runs, after the chain's previous
// node, so a state lives as long as the schedule's memory walk says (schedule/memory.hpp).
// MTP depths' nodes count toward their chunk only.
class StateLifetimes {
 public:
  struct Ends {
    bool first = false, last = false;  // the node begins / ends its layer's state
    bool chunk_done = false;           // the chunk's last node: its own tensors go after it
  };
  StateLifetimes(const schedule::Plan& plan, const std::vector<int>& order) {
    for (const int id : order) {
      const schedule::Node& n = plan.node(id);
      if (n.microbatch < 0) continue;
      ++chunk_left_[{n.microbatch, n.vp_stage}];
      if (n.layer >= 0 && !n.mtp) ++left_[{n.microbatch, n.vp_stage, n.layer}];
    }
  }
  // Called once per issued node, in the rank's issue order. `held`: this rank keeps state for the
  // node's layer (a pipeline stage keeps none for another stage's layers).
  Ends next(const schedule::Node& node, bool held = true) {
    Ends e;
    if (node.microbatch < 0) return e;
    if (node.layer >= 0 && !node.mtp && held) {
      const Key key{node.microbatch, node.vp_stage, node.layer};
      e.first = issued_[key]++ == 0;
      e.last = --left_[key] == 0;
    }
    e.chunk_done = --chunk_left_[{node.microbatch, node.vp_stage}] == 0;
    return e;
  }

 private:
  using Key = std::tuple<int, int, int>;
  std::map<Key, int> left_, issued_;
  std::map<std::pair<int, int>, int> chunk_left_;
};

// The expert a parameter belongs to ("...mlp.experts.local_experts.<e>...": e), or -1 for one that
// is no expert's.
inline int expert_index(const std::string& canonical) {
  static const std::string tag = "mlp.experts.local_experts.";
  const auto pos = canonical.find(tag);
  if (pos == std::string::npos) return -1;
  std::size_t end = pos + tag.size(), digits = 0;
  int e = 0;
  for (; end < canonical.size() && canonical[end] >= '0' && canonical[end] <= '9' && digits < 9; ++end, ++digits)
    e = e * 10 + (canonical[end] - '0');
  return digits == 0 ? -1 : e;
}

// What both executors require of a plan before they run it for `pattern`: EP dividing DP (each
// group of EP consecutive DP ranks holds the experts once; DP / EP such groups hold replicas), the
// plan built for this pattern (grouped or flattened alike, same MTP), the experts dividing over EP.
// "" when it holds, else the reason.
inline std::string plan_mismatch(const patterns::ParsedPattern& pattern, const schedule::Plan& plan, int num_experts) {
  if (plan.ep < 1 || plan.dp < 1 || plan.dp % plan.ep != 0)
    return "runs EP groups inside DP: ep " + std::to_string(plan.ep) + " must divide dp " + std::to_string(plan.dp);
  const auto planned = patterns::parse(plan.pattern);
  if (patterns::flatten(planned).flattened_symbols() != pattern.flattened_symbols() ||
      planned.logical_count() != pattern.logical_count() || planned.mtp != pattern.mtp ||
      planned.mtp_depths != pattern.mtp_depths)
    return "plan was built for pattern '" + plan.pattern + "', not '" + pattern.text + "'";
  if (pattern.has_moe() && (plan.ep < 1 || num_experts % plan.ep != 0))
    return std::to_string(num_experts) + " experts do not divide over EP " + std::to_string(plan.ep);
  return "";
}

// The rows an EP rank's experts receive, expert-major with the sources in rank order: from
// counts[source][local expert], offset[source][local expert] (the first row of that source's tokens
// for that expert) and start[local expert] (with the total last). Both executors lay rows out so.
template <class Count, class Offset>
void expert_major_rows(const std::vector<std::vector<Count>>& counts, int local_experts,
                       std::vector<std::vector<Offset>>& offset, std::vector<Offset>& start) {
  const std::size_t n = counts.size(), le_n = static_cast<std::size_t>(local_experts);
  offset.assign(n, std::vector<Offset>(le_n, 0));
  start.assign(le_n + 1, 0);
  Offset row = 0;
  for (std::size_t le = 0; le < le_n; ++le) {
    start[le] = row;
    for (std::size_t s = 0; s < n; ++s) {
      offset[s][le] = row;
      row += static_cast<Offset>(counts[s][le]);
    }
  }
  start.back() = row;
}

}  // namespace ht::engine::exec
