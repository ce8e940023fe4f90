// Plan invariant checks (see check.hpp).
#include "ht/schedule/check.hpp"

#include <cmath>
#include <sstream>

#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadPlan, message); }

// Which streams may run a node: comm slots on the comm stream; gradient reductions and
// parameter gathers on the comm stream (end-of-step all-reduce) or the dp stream (Megatron's
// DDP); TP/SP and CP collectives of a block on the compute stream with the block; expert-TP
// collectives with the all-to-alls on the comm stream; compute slots on the compute stream.
bool stream_allowed(const Node& n) {
  switch (n.slot) {
    case Slot::Dispatch:
    case Slot::Combine: return n.stream == Stream::Comm;
    case Slot::PipeSend:
    case Slot::PipeRecv: return n.stream == Stream::Comm && n.part == Part::Main;
    case Slot::GradAllReduce:
    case Slot::ParamGather: return n.stream != Stream::Compute && n.part == Part::Main;
    default: return n.stream == Stream::Compute && n.part != Part::EtpGather && n.part != Part::EtpScatter;
  }
}

int queue_of(const Node& n) { return n.rank * 3 + static_cast<int>(n.stream); }

std::string node_name(const Plan& plan, int id) {
  return "node " + std::to_string(id) + " (rank " + std::to_string(plan.node(id).rank) + ", " +
         plan.node(id).label() + ")";
}

}  // namespace

void check_plan_structure(const Plan& plan) {
  if (plan.pp < 1 || plan.chunks < 1 || plan.ep < 1 || plan.dp < 1 || plan.microbatches < 1)
    bad("plan sizes must be >= 1 (pp " + std::to_string(plan.pp) + ", vpp " +
        std::to_string(plan.chunks) + ", ep " + std::to_string(plan.ep) + ", dp " +
        std::to_string(plan.dp) + ", microbatches " + std::to_string(plan.microbatches) + ")");
  const int n_nodes = static_cast<int>(plan.nodes.size());
  const int n_ranks = static_cast<int>(plan.ranks.size());
  const int n_coll = static_cast<int>(plan.collectives.size());
  if (plan.tp < 1 || plan.cp < 1 || plan.etp < 1)
    bad("plan sizes must be >= 1 (tp " + std::to_string(plan.tp) + ", cp " + std::to_string(plan.cp) + ", etp " +
        std::to_string(plan.etp) + ")");
  if (static_cast<long long>(plan.layout_ranks()) != static_cast<long long>(plan.pp) * plan.dp * plan.tp * plan.cp)
    bad("plan has " + std::to_string(plan.layout_ranks()) + " ranks, but tp x cp x dp x pp = " +
        std::to_string(static_cast<long long>(plan.pp) * plan.dp * plan.tp * plan.cp));
  if (plan.world != 0 && plan.world < n_ranks) bad("plan.world = " + std::to_string(plan.world) + " is below its ranks");
  for (const RankPlan& rp : plan.ranks)
    if (rp.original < -1 || rp.original >= plan.layout_ranks() || rp.stands_for < 1)
      bad("ranks[" + std::to_string(rp.rank) + "] stands for layout rank " + std::to_string(rp.original) + " x " +
          std::to_string(rp.stands_for));
  for (int i = 0; i < n_nodes; ++i) {
    const Node& n = plan.nodes[static_cast<std::size_t>(i)];
    const std::string where = "node " + std::to_string(i);
    if (n.id != i) bad(where + " has id " + std::to_string(n.id));
    if (n.rank < 0 || n.rank >= n_ranks) bad(where + " names rank " + std::to_string(n.rank) + " of " + std::to_string(n_ranks));
    if (n.microbatch < -1 || n.microbatch >= plan.microbatches)
      bad(where + " has microbatch " + std::to_string(n.microbatch));
    if (n.vp_stage < 0 || n.vp_stage >= plan.chunks)
      bad(where + " has vp_stage " + std::to_string(n.vp_stage) + " (vpp " + std::to_string(plan.chunks) + ")");
    if (!stream_allowed(n))
      bad(where + " runs slot " + std::string(to_string(n.slot)) + " (" + std::string(to_string(n.part)) +
          ") on the " + std::string(to_string(n.stream)) + " stream");
    if (!std::isfinite(n.flops) || n.flops < 0 || !std::isfinite(n.mem_bytes) || n.mem_bytes < 0)
      bad(where + " has a negative or non-finite cost");
    for (const Transfer& t : n.sends)
      if (t.peer < 0 || t.peer >= plan.layout_ranks() || !std::isfinite(t.bytes) || t.bytes < 0)
        bad(where + " sends to peer " + std::to_string(t.peer) + " " + std::to_string(t.bytes) + " bytes");
    for (int d : n.deps)
      if (d < 0 || d >= n_nodes || d == i) bad(where + " depends on the dangling node id " + std::to_string(d));
    if (n.collective < -1 || n.collective >= n_coll)
      bad(where + " names the dangling collective " + std::to_string(n.collective));
  }
  std::vector<int> issued(static_cast<std::size_t>(n_nodes), 0);
  for (int r = 0; r < n_ranks; ++r) {
    const RankPlan& rp = plan.ranks[static_cast<std::size_t>(r)];
    if (rp.rank != r) bad("ranks[" + std::to_string(r) + "] has rank " + std::to_string(rp.rank));
    for (int id : rp.issue) {
      if (id < 0 || id >= n_nodes) bad("rank " + std::to_string(r) + " issues the dangling node id " + std::to_string(id));
      if (plan.node(id).rank != r) bad("rank " + std::to_string(r) + " issues " + node_name(plan, id));
      if (issued[static_cast<std::size_t>(id)]++) bad(node_name(plan, id) + " is issued twice");
    }
  }
  for (int i = 0; i < n_nodes; ++i)
    if (!issued[static_cast<std::size_t>(i)]) bad(node_name(plan, i) + " is never issued");
  std::vector<int> membership(static_cast<std::size_t>(n_nodes), 0);
  for (int c = 0; c < n_coll; ++c) {
    const Collective& col = plan.collectives[static_cast<std::size_t>(c)];
    if (col.id != c) bad("collectives[" + std::to_string(c) + "] has id " + std::to_string(col.id));
    if (col.nodes.empty()) bad("collective " + std::to_string(c) + " has no members");
    for (int id : col.nodes) {
      if (id < 0 || id >= n_nodes) bad("collective " + std::to_string(c) + " names the dangling node id " + std::to_string(id));
      if (plan.node(id).collective != c)
        bad("collective " + std::to_string(c) + " lists " + node_name(plan, id) + ", which names collective " +
            std::to_string(plan.node(id).collective));
      if (membership[static_cast<std::size_t>(id)]++) bad(node_name(plan, id) + " is listed twice in collectives");
    }
  }
  for (int i = 0; i < n_nodes; ++i)
    if (plan.nodes[static_cast<std::size_t>(i)].collective >= 0 && !membership[static_cast<std::size_t>(i)])
      bad(node_name(plan, i) + " names collective " + std::to_string(plan.nodes[static_cast<std::size_t>(i)].collective) +
          ", which does not list it");
}

std::string find_deadlock(const Plan& plan) {
  const std::size_t n = plan.nodes.size();
  // Stream queues: issue order restricted to each (rank, stream).
  std::vector<std::vector<int>> queues(plan.ranks.size() * 3);
  for (const RankPlan& rp : plan.ranks)
    for (int id : rp.issue) queues[static_cast<std::size_t>(queue_of(plan.node(id)))].push_back(id);
  std::vector<std::size_t> head(queues.size(), 0);
  std::vector<char> done(n, 0);
  auto at_head = [&](int id) {
    const auto q_index = static_cast<std::size_t>(queue_of(plan.node(id)));
    const auto& q = queues[q_index];
    const std::size_t h = head[q_index];
    return h < q.size() && q[h] == id;
  };
  auto deps_done = [&](int id) {
    for (int d : plan.node(id).deps)
      if (!done[static_cast<std::size_t>(d)]) return false;
    return true;
  };
  auto rendezvous = [&](const Node& nd) {
    return nd.collective >= 0 &&
           plan.collectives[static_cast<std::size_t>(nd.collective)].kind != CollectiveKind::PointToPoint;
  };
  std::size_t completed = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t q = 0; q < queues.size(); ++q) {
      while (head[q] < queues[q].size()) {
        const int id = queues[q][head[q]];
        const Node& nd = plan.node(id);
        if (!deps_done(id)) break;
        if (rendezvous(nd)) {
          const auto& members = plan.collectives[static_cast<std::size_t>(nd.collective)].nodes;
          bool all_ready = true;
          for (int m : members) all_ready = all_ready && at_head(m) && deps_done(m);
          if (!all_ready) break;
          for (int m : members) {
            done[static_cast<std::size_t>(m)] = 1;
            const Node& mn = plan.node(m);
            ++head[static_cast<std::size_t>(queue_of(mn))];
            ++completed;
          }
        } else {
          done[static_cast<std::size_t>(id)] = 1;
          ++head[q];
          ++completed;
        }
        progress = true;
      }
    }
  }
  if (completed == n) return "";
  std::ostringstream out;
  out << (n - completed) << " of " << n << " nodes can never start; stuck stream heads:";
  for (std::size_t q = 0; q < queues.size(); ++q)
    if (head[q] < queues[q].size()) out << " [" << node_name(plan, queues[q][head[q]]) << "]";
  return out.str();
}

std::string beyond_engines(const Plan& plan) {
  std::string what;
  auto add = [&](const std::string& item) { what += (what.empty() ? "" : ", ") + item; };
  if (plan.tp > 1) add("tensor parallelism (tp " + std::to_string(plan.tp) + ")");
  if (plan.cp > 1) add("context parallelism (cp " + std::to_string(plan.cp) + ")");
  if (plan.etp > 1) add("expert tensor parallelism (etp " + std::to_string(plan.etp) + ")");
  bool dp_stream = false, recompute = false, parts = false;
  for (const Node& n : plan.nodes) {
    dp_stream = dp_stream || n.stream == Stream::Dp || n.slot == Slot::OptimizerStep || n.slot == Slot::ParamGather;
    recompute = recompute || n.phase == Phase::Recompute;
    parts = parts || n.part != Part::Main;
  }
  if (dp_stream) add("Megatron's DDP gradient sync (buckets, optimizer step, parameter gathers)");
  if (recompute) add("activation recomputation");
  if (parts && what.empty()) add("TP/CP collectives");
  if (what.empty()) return "";
  return "the plan uses " + what + ", which the engines do not run (the twin simulates it)";
}

}  // namespace ht::schedule
