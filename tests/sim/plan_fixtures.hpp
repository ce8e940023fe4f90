// Hand-made plans and exact platforms for the twin's tests: small enough to compute the answer on
// paper (closed forms), independent of the schedule builder.
#pragma once

#include <vector>

#include "ht/schedule/plan.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"

namespace ht::sim::test {

using schedule::Group;
using schedule::CollectiveKind;
using schedule::Phase;
using schedule::Plan;
using schedule::Slot;
using schedule::Stream;

// A GPU that runs exactly 1e12 flop/s and an interconnect at nominal rates (efficiencies 1), so
// a compute node of `s * 1e12` flops takes `s` seconds and a flow takes latency + bytes / bw.
inline PlatformSpec exact_platform(int nodes, int gpus_per_node) {
  PlatformSpec p = preset("dgx-h100");
  p.nodes = nodes;
  p.gpus_per_node = gpus_per_node;
  p.nvlink_efficiency = 1;
  p.nic_efficiency = 1;
  p.gpu.peak_flops = 1e12;
  p.gpu.flops_efficiency = 1;
  p.gpu.hbm_bytes_per_s = 1e18;
  p.gpu.hbm_efficiency = 1;
  p.gpu.nccl_sms = 0;  // no SM sharing: closed forms of compute and comm apart
  p.gpu.slow_gpu_spread = 0;
  p.gpu.nccl_p2p_sms = 0;
  p.gpu.overlap_clock = 1;  // nor a power-capped clock beside communication
  return p;
}

inline CostModel exact_costs() {
  CostModel c;
  c.launch_overhead_s = 0;
  c.host_launch_s = 0;
  c.grouped_launch_s = 0;
  return c;
}

class PlanBuilder {
 public:
  explicit PlanBuilder(int world) {
    for (int r = 0; r < world; ++r) {
      schedule::RankPlan rp;
      rp.rank = rp.ep_rank = rp.dp_rank = r;
      plan_.ranks.push_back(rp);
    }
  }

  // A compute node of `seconds` on the exact platform.
  int compute(int rank, double seconds, std::vector<int> deps = {}, int mb = 0,
              Phase phase = Phase::Forward, Slot slot = Slot::PreDispatch) {
    return add(rank, Stream::Compute, slot, phase, mb, seconds * 1e12, {}, std::move(deps));
  }

  // One all-to-all over `ranks`: bytes[i][j] from ranks[i] to ranks[j]; deps[i] for member i.
  // A combine by default: one payload round. A forward dispatch first exchanges the per-expert
  // counts (replay.hpp, kDispatchCountBytes), which its own closed-form test covers.
  std::vector<int> all_to_all(const std::vector<int>& ranks, const std::vector<std::vector<double>>& bytes,
                              const std::vector<std::vector<int>>& deps = {}, int mb = 0,
                              Slot slot = Slot::Combine) {
    std::vector<int> ids;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      std::vector<schedule::Transfer> sends;
      for (std::size_t j = 0; j < ranks.size(); ++j)
        if (i != j && bytes[i][j] > 0) sends.push_back({ranks[j], bytes[i][j]});
      ids.push_back(add(ranks[i], Stream::Comm, slot, Phase::Forward, mb, 0, std::move(sends),
                        deps.empty() ? std::vector<int>{} : deps[i]));
    }
    collective(CollectiveKind::AllToAll, ids);
    return ids;
  }

  // Uniform all-to-all: every member sends `bytes_per_peer` to every other member.
  std::vector<int> uniform_a2a(const std::vector<int>& ranks, double bytes_per_peer,
                               const std::vector<std::vector<int>>& deps = {}, int mb = 0,
                               Slot slot = Slot::Combine) {
    std::vector<std::vector<double>> m(ranks.size(), std::vector<double>(ranks.size(), bytes_per_peer));
    return all_to_all(ranks, m, deps, mb, slot);
  }

  // Ring all-reduce of `bytes` (no sends: the replay's ring model).
  std::vector<int> all_reduce(const std::vector<int>& ranks, double bytes) {
    std::vector<int> ids;
    for (int r : ranks) ids.push_back(add(r, Stream::Comm, Slot::GradAllReduce, Phase::Weight, -1, 0, {}, {}, bytes));
    collective(CollectiveKind::AllReduce, ids);
    return ids;
  }

  // Pipeline p2p as a two-member collective: the send carries the bytes, the receive lists it.
  std::pair<int, int> p2p(int from, int to, double bytes, std::vector<int> send_deps, int mb = 0) {
    int s = add(from, Stream::Comm, Slot::PipeSend, Phase::Forward, mb, 0, {{to, bytes}}, std::move(send_deps));
    int r = add(to, Stream::Comm, Slot::PipeRecv, Phase::Forward, mb, 0, {}, {s});
    collective(CollectiveKind::PointToPoint, {s, r});
    return {s, r};
  }

  int add(int rank, Stream stream, Slot slot, Phase phase, int mb, double flops,
          std::vector<schedule::Transfer> sends, std::vector<int> deps, double mem_bytes = 0) {
    schedule::Node n;
    n.id = static_cast<int>(plan_.nodes.size());
    n.rank = rank;
    n.stream = stream;
    n.slot = slot;
    n.phase = phase;
    n.microbatch = mb;
    n.flops = flops;
    n.mem_bytes = mem_bytes;
    n.sends = std::move(sends);
    n.deps = std::move(deps);
    plan_.nodes.push_back(n);
    plan_.ranks[rank].issue.push_back(n.id);
    return n.id;
  }

  void collective(CollectiveKind kind, const std::vector<int>& nodes) {
    const int id = static_cast<int>(plan_.collectives.size());
    const Group group = kind == CollectiveKind::PointToPoint ? Group::Pp
                        : kind == CollectiveKind::AllReduce  ? Group::Dp
                                                             : Group::Ep;
    plan_.collectives.push_back({id, kind, group, nodes, {}});
    for (int n : nodes) plan_.nodes[n].collective = id;
  }

  Plan& plan() { return plan_; }

 private:
  Plan plan_;
};

// Classic 1F1B without communication cost: stage s warms up with pp-1-s forwards, then
// alternates one forward and one backward, then drains. Forward of (s, mb) needs (s-1, mb);
// backward of (s, mb) needs (s+1, mb) and its own forward.
inline Plan one_f_one_b(int pp, int microbatches, double f_s, double b_s) {
  PlanBuilder b(pp);
  std::vector<std::vector<int>> fwd(pp, std::vector<int>(microbatches, -1)), bwd = fwd;
  // Issue order per stage; nodes are created stage by stage so deps on later stages are patched.
  std::vector<std::vector<std::pair<bool, int>>> order(pp);
  for (int s = 0; s < pp; ++s) {
    const int warm = std::min(pp - 1 - s, microbatches);
    int f = 0, k = 0;
    for (; f < warm; ++f) order[s].push_back({true, f});
    for (; f < microbatches; ++f, ++k) {
      order[s].push_back({true, f});
      order[s].push_back({false, k});
    }
    for (; k < microbatches; ++k) order[s].push_back({false, k});
  }
  for (int s = 0; s < pp; ++s)
    for (auto [is_f, mb] : order[s]) {
      int id = b.compute(s, is_f ? f_s : b_s, {}, mb, is_f ? Phase::Forward : Phase::Backward);
      (is_f ? fwd : bwd)[s][mb] = id;
    }
  for (int s = 0; s < pp; ++s)
    for (int mb = 0; mb < microbatches; ++mb) {
      if (s > 0) b.plan().nodes[fwd[s][mb]].deps.push_back(fwd[s - 1][mb]);
      b.plan().nodes[bwd[s][mb]].deps.push_back(fwd[s][mb]);
      if (s + 1 < pp) b.plan().nodes[bwd[s][mb]].deps.push_back(bwd[s + 1][mb]);
    }
  b.plan().pp = pp;
  b.plan().microbatches = microbatches;
  return b.plan();
}

// EP=2 toy layer: per microbatch a compute node of `c_s` then an all-to-all of `bytes` each way.
// Sequential: the next microbatch's compute waits for this all-to-all. Overlapped: it does not,
// so the all-to-all of mb i runs under the compute of mb i+1.
inline Plan toy_layer(int microbatches, double c_s, double bytes, bool overlap, int world = 2) {
  PlanBuilder b(world);
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(r);
  std::vector<int> last_a2a(world, -1);
  for (int mb = 0; mb < microbatches; ++mb) {
    std::vector<std::vector<int>> deps(world);
    for (int r = 0; r < world; ++r) {
      std::vector<int> cdeps;
      if (!overlap && last_a2a[r] >= 0) cdeps.push_back(last_a2a[r]);
      deps[r].push_back(b.compute(r, c_s, cdeps, mb));
    }
    auto ids = b.uniform_a2a(ranks, bytes, deps, mb);
    for (int r = 0; r < world; ++r) last_a2a[r] = ids[r];
  }
  b.plan().overlap = overlap;
  b.plan().microbatches = microbatches;
  return b.plan();
}

}  // namespace ht::sim::test
