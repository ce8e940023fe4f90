// Replay of a schedule plan on SimGrid actors (see replay.hpp for the model). The state below is
// shared by all actors of one replay; SimGrid runs actors one at a time, so plain data suffices.
#include "ht/sim/replay.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Exec.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Semaphore.hpp>
#include <xbt/log.h>

#include "ht/sim/error.hpp"
#include "simgrid_platform.hpp"
#include "ht/schedule/fold.hpp"
#include "raw_replay.hpp"
#include "timeline_build.hpp"

namespace ht::sim {

namespace sg4 = simgrid::s4u;
using schedule::CollectiveKind;
using schedule::Node;
using schedule::Plan;
using schedule::Stream;

std::string_view to_string(A2aModel m) {
  switch (m) {
    case A2aModel::Auto: return "auto";
    case A2aModel::Pairwise: return "pairwise";
    case A2aModel::Aggregated: return "aggregated";
  }
  return "auto";
}

A2aModel parse_a2a_model(std::string_view text) {
  if (text == "auto") return A2aModel::Auto;
  if (text == "pairwise") return A2aModel::Pairwise;
  if (text == "aggregated") return A2aModel::Aggregated;
  throw SimError(SimErrorCode::BadPlan,
                 "unknown all-to-all model '" + std::string(text) + "' (auto, pairwise, aggregated)");
}

namespace {

// A collective whose per-peer sends differ by more than 1 % (skewed routing). Self-sends, named
// by the layout's rank, do not count.
bool skewed_collective(const Plan& plan, const schedule::Collective& c) {
  double lo = 0, hi = 0;
  bool first = true;
  for (int m : c.nodes) {
    const Node& n = plan.nodes[static_cast<std::size_t>(m)];
    for (const auto& t : n.sends) {
      if (t.peer == plan.original_rank(n.rank)) continue;
      lo = first ? t.bytes : std::min(lo, t.bytes);
      hi = first ? t.bytes : std::max(hi, t.bytes);
      first = false;
    }
  }
  return hi > lo * 1.01;
}

constexpr int kStreamsPerRank = 3;  // compute, comm, dp (schedule::Stream)

struct Flow {
  int src = 0;       // node ids; dst -1 for a transfer to a folded rank (fold.hpp)
  int dst = 0;
  int dst_host = 0;  // original rank whose host receives it
  std::uint64_t bytes = 0;
};

struct CollectiveState {
  int arrived = 0;
  int finished = 0;
  int waiter_head = -1;  // actors waiting for the rendezvous
  double release_s = 0;
  std::vector<Flow> flows;   // sorted by src member
  std::vector<int> offsets;  // member index -> first flow of that member; size members + 1
};

struct ReplayState {
  const Plan& plan;
  const PlatformSpec& platform;
  const CostModel& costs;
  const ReplayOptions& options;
  std::vector<sg4::Host*> hosts;
  sg4::Host* shared_cpu = nullptr;  // PlatformSpec::host_cores: where all compute runs
  double origin_s = 0;

  std::vector<std::uint8_t> done;
  std::vector<double> start, end;
  std::vector<int> waiter_head;   // node -> first actor waiting for it
  std::vector<int> member_index;  // node -> its index in its collective
  std::vector<int> pending_in;    // node -> flows addressed to it still in flight
  std::vector<int> in_waiter;     // node -> actor waiting for its incoming flows
  std::vector<CollectiveState> collectives;

  std::vector<double> work_cache;  // (work, phase) -> seconds; NaN until computed
  std::vector<int> next_waiter;   // actor -> next actor in the same waiting list
  std::vector<sg4::SemaphorePtr> wake;
  std::vector<int> blocked_on;    // actor -> node it waits for (deadlock report)

  std::int64_t activities = 0, flows_started = 0, completed = 0, next_report = 0;
  bool used_pairwise = false, used_aggregated = false;
  bool deadlocked = false;

  ReplayState(const Plan& p, const PlatformSpec& s, const CostModel& c, const ReplayOptions& o)
      : plan(p), platform(s), costs(c), options(o) {
    for (const auto& col : plan.collectives) {
      if (!col.ranks.empty()) {
        member_ranks.push_back(col.ranks);
        continue;
      }
      std::vector<int> ranks;
      for (int m : col.nodes) ranks.push_back(plan.original_rank(plan.nodes[m].rank));
      member_ranks.push_back(std::move(ranks));
    }
  }

  // The layout's rank (host) of a plan rank; every layout rank of a collective (fold.hpp).
  int original(int plan_rank) const { return plan.original_rank(plan_rank); }
  std::vector<std::vector<int>> member_ranks;
  sg4::Host* host_of_node(int node) const { return hosts[original(plan.nodes[node].rank)]; }

  double now() const { return sg4::Engine::get_clock(); }

  void block(int actor) { wake[actor]->acquire(); }
  // A stream that was blocked runs again CostModel::wake_latency_s after its wake-up.
  void resume() const {
    if (costs.wake_latency_s > 0) sg4::this_actor::sleep_for(costs.wake_latency_s);
  }

  void wait_for(int actor, int node) {
    while (!done[node]) {
      blocked_on[actor] = node;
      next_waiter[actor] = waiter_head[node];
      waiter_head[node] = actor;
      block(actor);
    }
    blocked_on[actor] = -1;
  }

  void wake_list(int head) {
    while (head >= 0) {
      int next = next_waiter[head];
      wake[head]->release();
      head = next;
    }
  }

  void finish(int n) {
    done[n] = 1;
    end[n] = now();
    int head = waiter_head[n];
    waiter_head[n] = -1;
    wake_list(head);
    ++completed;
    if (options.progress && completed >= next_report) {
      const auto total = static_cast<std::int64_t>(plan.nodes.size());
      options.progress(static_cast<double>(completed) / static_cast<double>(total));
      next_report = completed + std::max<std::int64_t>(1, total / 20);
    }
  }

  int node_of_rank(int rank) const { return rank / std::max(1, platform.gpus_per_node); }

  // Cluster nodes a flow of this replay can start or end on (build_platform builds only these,
  // so a folded replay of a large world builds few): the simulated ranks and their sends'
  // peers (an aggregated collective's: its own and the next cluster node, plan_flows), a ring's
  // successors
  // and every member of an all-to-all (the dispatch's count round reaches them all).
  std::vector<char> touched_nodes() const {
    std::vector<char> touched(static_cast<std::size_t>(node_of_rank(plan.layout_ranks() - 1) + 1), 0);
    auto touch = [&](int rank) { touched[static_cast<std::size_t>(node_of_rank(rank))] = 1; };
    for (const auto& rp : plan.ranks) touch(original(rp.rank));
    for (const Node& n : plan.nodes)
      if (n.collective < 0 || !aggregated(plan.collectives[static_cast<std::size_t>(n.collective)]))
        for (const auto& t : n.sends) touch(t.peer);
    for (const auto& c : plan.collectives) {
      const auto& ranks = member_ranks[static_cast<std::size_t>(c.id)];
      bool any_sends = false;
      for (int m : c.nodes) any_sends = any_sends || !plan.nodes[m].sends.empty();
      if (c.kind == CollectiveKind::AllToAll) {
        for (int r : ranks) touch(r);
      } else if (c.kind == CollectiveKind::AllReduce && !any_sends) {
        for (int m : c.nodes) {
          const auto at = std::find(ranks.begin(), ranks.end(), original(plan.nodes[m].rank)) - ranks.begin();
          touch(ranks[static_cast<std::size_t>(at + 1) % ranks.size()]);
        }
      } else if (aggregated(c)) {
        std::vector<int> group_nodes;
        for (int r : ranks) group_nodes.push_back(node_of_rank(r));
        std::sort(group_nodes.begin(), group_nodes.end());
        group_nodes.erase(std::unique(group_nodes.begin(), group_nodes.end()), group_nodes.end());
        for (int m : c.nodes) {
          const auto at = std::lower_bound(group_nodes.begin(), group_nodes.end(),
                                           node_of_rank(original(plan.nodes[m].rank))) - group_nodes.begin();
          const int next = group_nodes[static_cast<std::size_t>(at + 1) % group_nodes.size()];
          touched[static_cast<std::size_t>(next)] = 1;
        }
      }
    }
    return touched;
  }

  // A reduce-scatter, all-gather or all-reduce given as per-peer sends runs as NCCL runs it: a
  // ring per channel, one channel per GPU of a node, so that each channel crosses into the next
  // node through another GPU's NIC (the rail). Per member: its ring volume R (the sum of its
  // sends: (n-1)/n of the buffer, twice that for an all-reduce) goes to its successor; over the
  // g members of its node, g-1 channels stay on NVLink and one leaves through its NIC, so
  // R(g-1)/g crosses NVLink and R/g the NIC. Inside one node the whole R crosses NVLink. The
  // node's aggregate NIC bandwidth is then the collective's bus bandwidth across nodes, as
  // physics.md 2.1 derives from nccl-tests' ring formulas (direct sends to every peer would put
  // (n-g)/n of the buffer on each NIC: up to g times the bytes).
  static bool ring(const schedule::Collective& c) {
    return c.kind == CollectiveKind::AllReduce || c.kind == CollectiveKind::AllGather ||
           c.kind == CollectiveKind::ReduceScatter;
  }

  // All-to-alls can be aggregated (rings always are, above); p2p is one flow anyway.
  bool aggregated(const schedule::Collective& c) const {
    if (c.kind == CollectiveKind::PointToPoint) return false;
    if (ring(c)) return true;
    switch (options.a2a) {
      case A2aModel::Pairwise: return false;
      case A2aModel::Aggregated: return true;
      case A2aModel::Auto:
        return static_cast<int>(member_ranks[static_cast<std::size_t>(c.id)].size()) > options.pairwise_max_group &&
               !skewed(c);
    }
    return false;
  }

  // Routing skew concentrates bytes on hot receivers, which aggregated flows would spread out
  // (tests: 0.27x the pairwise time at Zipf 1.5), so Auto keeps skewed collectives pairwise.
  bool skewed(const schedule::Collective& c) const { return skewed_collective(plan, c); }

  static std::uint64_t whole_bytes(double b) { return b > 0 ? static_cast<std::uint64_t>(std::llround(b)) : 0; }

  // Flows of a collective, decided once when the last member arrives. Members are named by their
  // original ranks (every rank of the collective, folded or not); flows go from the simulated
  // members to hosts, and count as arrivals only when a simulated member receives them.
  std::vector<Flow> plan_flows(const schedule::Collective& c) const {
    const auto& members = c.nodes;
    const auto& ranks = member_ranks[static_cast<std::size_t>(c.id)];  // original member ranks
    const int n = static_cast<int>(ranks.size());
    std::map<int, int> node_of;  // original rank -> simulated member node
    for (int m : members) node_of[original(plan.nodes[m].rank)] = m;
    auto receiver = [&](int rank) {
      const auto it = node_of.find(rank);
      return it == node_of.end() ? -1 : it->second;
    };
    std::vector<Flow> flows;
    bool any_sends = false;
    for (int m : members) any_sends = any_sends || !plan.nodes[m].sends.empty();
    if (c.kind == CollectiveKind::AllReduce && !any_sends) {
      // Ring: each member forwards 2(n-1)/n of the buffer to its successor (reduce-scatter +
      // all-gather), so a uniform ring finishes in 2(n-1)/n * bytes / bw.
      if (n < 2) return flows;
      for (int m : members) {
        const Node& node = plan.nodes[m];
        const auto at = std::find(ranks.begin(), ranks.end(), original(node.rank)) - ranks.begin();
        const int next = ranks[static_cast<std::size_t>((at + 1) % n)];
        const double bytes = 2.0 * (n - 1) / n * node.mem_bytes;
        if (bytes > 0) flows.push_back({m, receiver(next), next, whole_bytes(bytes)});
      }
      return flows;
    }
    if (!aggregated(c)) {
      for (int m : members) {
        const Node& node = plan.nodes[m];
        for (const auto& t : node.sends) {
          if (t.peer == original(node.rank) || whole_bytes(t.bytes) == 0) continue;
          flows.push_back({m, receiver(t.peer), t.peer, whole_bytes(t.bytes)});
        }
      }
      return flows;
    }
    // Aggregated (and rings): the group's ranks by cluster node, in collective order.
    std::map<int, std::vector<int>> by_node;  // cluster node -> original ranks
    for (int r : ranks) by_node[node_of_rank(r)].push_back(r);
    std::vector<int> group_nodes;
    for (const auto& [cn, _] : by_node) group_nodes.push_back(cn);
    for (int m : members) {
      const Node& node = plan.nodes[m];
      const int me = original(node.rank);
      const int cn = node_of_rank(me);
      double intra = 0, inter = 0;
      for (const auto& t : node.sends) {
        if (t.peer == me) continue;
        (node_of_rank(t.peer) == cn ? intra : inter) += t.bytes;
      }
      const auto& local = by_node[cn];
      if (ring(c)) {  // NCCL's rings (see ring()): 1/g of the volume leaves through the NIC
        const double volume = intra + inter;
        inter = group_nodes.size() > 1 ? volume / static_cast<double>(local.size()) : 0;
        intra = volume - inter;
      }
      const auto pos = static_cast<std::size_t>(std::find(local.begin(), local.end(), me) - local.begin());
      if (whole_bytes(intra) > 0 && local.size() > 1) {
        const int to = local[(pos + 1) % local.size()];
        flows.push_back({m, receiver(to), to, whole_bytes(intra)});
      }
      if (whole_bytes(inter) > 0 && group_nodes.size() > 1) {
        const auto at = std::find(group_nodes.begin(), group_nodes.end(), cn) - group_nodes.begin();
        const auto& remote = by_node[group_nodes[(static_cast<std::size_t>(at) + 1) % group_nodes.size()]];
        const int to = remote[pos % remote.size()];
        flows.push_back({m, receiver(to), to, whole_bytes(inter)});
      }
    }
    return flows;
  }

  void release_collective(int cid) {
    const auto& c = plan.collectives[cid];
    CollectiveState& cs = collectives[cid];
    cs.release_s = now();
    cs.flows = plan_flows(c);
    if (c.kind == CollectiveKind::AllToAll) (aggregated(c) ? used_aggregated : used_pairwise) = true;
    std::stable_sort(cs.flows.begin(), cs.flows.end(), [&](const Flow& a, const Flow& b) {
      return member_index[a.src] < member_index[b.src];
    });
    cs.offsets.assign(c.nodes.size() + 1, 0);
    for (const Flow& f : cs.flows) {
      ++cs.offsets[member_index[f.src] + 1];
      if (f.dst >= 0) ++pending_in[f.dst];
    }
    for (std::size_t i = 1; i < cs.offsets.size(); ++i) cs.offsets[i] += cs.offsets[i - 1];
    int head = cs.waiter_head;
    cs.waiter_head = -1;
    wake_list(head);
  }

  // Starts `flows` from this actor, waits for each, and credits the receivers as they land.
  void run_flows(std::vector<Flow>::const_iterator first, std::vector<Flow>::const_iterator last,
                 bool count_receivers) {
    std::vector<sg4::CommPtr> comms;
    std::vector<int> dst;
    for (auto f = first; f != last; ++f) {
      comms.push_back(sg4::Comm::sendto_async(host_of_node(f->src), hosts[f->dst_host], f->bytes));
      dst.push_back(f->dst);
    }
    activities += static_cast<std::int64_t>(comms.size());
    flows_started += static_cast<std::int64_t>(comms.size());
    while (!comms.empty()) {
      auto k = static_cast<std::size_t>(sg4::Comm::wait_any(comms));
      if (count_receivers && dst[k] >= 0 && --pending_in[dst[k]] == 0 && in_waiter[dst[k]] >= 0) {
        int actor = in_waiter[dst[k]];
        in_waiter[dst[k]] = -1;
        wake[actor]->release();
      }
      comms.erase(comms.begin() + static_cast<std::ptrdiff_t>(k));
      dst.erase(dst.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }

  // The forward dispatch's count round (kDispatchCountBytes), then a wake-up before the payload.
  // On a preset platform the round takes what one such message takes alone, latency plus bytes
  // over the slowest link it crosses (a 64-byte message does not load a link), without building
  // a flow per peer; an XML platform's routes are its own, so there each message is a flow.
  void exchange_counts(const Node& node, const schedule::Collective& c) {
    const int me = original(node.rank);
    if (platform.xml_file.empty()) {
      bool off_node = false;
      int peers = 0;
      for (int r : member_ranks[static_cast<std::size_t>(c.id)])
        if (r != me) {
          ++peers;
          off_node = off_node || node_of_rank(r) != node_of_rank(me);
        }
      if (peers == 0) return;
      flows_started += peers;
      const double round = off_node ? platform.nic_latency_s + kDispatchCountBytes / platform.nic_effective()
                                    : platform.nvlink_latency_s + kDispatchCountBytes / platform.nvlink_effective();
      sg4::this_actor::sleep_for(round);
      resume();
      return;
    }
    std::vector<sg4::CommPtr> comms;
    for (int r : member_ranks[static_cast<std::size_t>(c.id)])
      if (r != me)
        comms.push_back(sg4::Comm::sendto_async(hosts[me], hosts[r], static_cast<std::uint64_t>(kDispatchCountBytes)));
    activities += static_cast<std::int64_t>(comms.size());
    flows_started += static_cast<std::int64_t>(comms.size());
    sg4::Comm::wait_all(comms);
    resume();
  }

  // SMs the communication kernel of `node` holds on its GPU while its transfers fly: the
  // dispatcher's own (DeepEP, HybridEP) for EP all-to-alls, else NCCL's (fewer for a p2p send).
  int comm_sms(const Node& node) const {
    if (node.collective < 0) return platform.gpu.nccl_p2p_sms;
    const auto& c = plan.collectives[static_cast<std::size_t>(node.collective)];
    if (c.kind == CollectiveKind::PointToPoint) return platform.gpu.nccl_p2p_sms;
    if (c.kind == CollectiveKind::AllToAll && c.group == schedule::Group::Ep && plan.ep_comm_sms > 0) return plan.ep_comm_sms;
    return platform.gpu.nccl_sms;
  }

  // While a comm node's transfers fly, compute on the same GPU runs slower: by the cost model's
  // interference_factor when one is set (calibrated runs), else by the SMs the communication
  // kernel holds (SM sharing: compute keeps (S - s) of S SMs, at the clock under overlap). A
  // background execution of weight w next to compute of weight 1 leaves the compute 1/(1 + w) of
  // the GPU: w = f - 1, or 1/speed - 1. Several comm kernels at once add their weights. A
  // compute node that carries a collective (CP ring, TP overlap, the backward's re-gather) shares
  // the GPU with it the same way. The CPU backend shares no SMs.
  sg4::ExecPtr start_interference(const Node& node) const {
    // Compute beside a communication kernel keeps the SMs it leaves, at the clock the power cap
    // allows while both run (speed_beside_comm): a noise of weight 1/speed - 1 takes the rest.
    const double weight = 1 / speed_beside_comm(costs, platform, comm_sms(node)) - 1;
    if (weight <= 0) return nullptr;
    auto noise = sg4::this_actor::exec_init(1e30);
    noise->set_priority(weight);
    noise->start();
    return noise;
  }

  // `seconds` of work on one processor: the GPU of the calling stream, or one core of the shared
  // CPU host, whose cores every rank's running work divides among itself.
  void execute(double seconds) const {
    if (shared_cpu == nullptr) {
      sg4::this_actor::execute(seconds * sg4::this_actor::get_host()->get_speed());
      return;
    }
    sg4::ExecPtr work = sg4::this_actor::exec_init(seconds * shared_cpu->get_speed());
    work->set_host(shared_cpu);
    work->start();
    work->wait();
  }

  // Kernel-model seconds of a work in a phase, computed once per (work, phase): many nodes share
  // a work (every microbatch of a layer type).
  double node_seconds(const Node& node) {
    const schedule::Work* work = node.work >= 0 ? &plan.works[static_cast<std::size_t>(node.work)] : nullptr;
    // A measured table prices nodes one by one (rows, FLOP shares): no sharing across a work.
    if (work == nullptr || !costs.measured_s.empty())
      return costs.compute_seconds(node, platform.gpu, work, plan.delay_wgrad, plan.cuda_graphs);
    const std::size_t key = static_cast<std::size_t>(node.work) * 4 + static_cast<std::size_t>(node.phase);
    if (std::isnan(work_cache[key]))
      work_cache[key] = costs.compute_seconds(node, platform.gpu, work, plan.delay_wgrad, plan.cuda_graphs);
    return work_cache[key];
  }

  void run_compute(const Node& node) {
    const double seconds = node_seconds(node);
    if (seconds <= 0) return;
    ++activities;
    execute(seconds);
  }

  // The host-side work of a comm node (copies, launches): a pause for a GPU, CPU work when the
  // ranks share a CPU host (the CPU backend's comm stream copies on the same cores).
  // On the shared cores, comm-stream work has priority over compute when the platform says so
  // (comm_priority: the CPU backend's real-time comm threads, like Megatron's high-priority comm
  // stream): weight 1e3 against 1 takes a whole core from the compute sharing it.
  void host_work(double seconds) const {
    if (seconds <= 0) return;
    if (shared_cpu == nullptr) {
      sg4::this_actor::sleep_for(seconds);
      return;
    }
    sg4::ExecPtr work = sg4::this_actor::exec_init(seconds * shared_cpu->get_speed());
    work->set_host(shared_cpu);
    if (platform.comm_priority) work->set_priority(1e3);
    work->start();
    work->wait();
  }
  void comm_host_work() const { host_work(costs.comm_launch_s); }

  void run_comm(int actor, const Node& node) {
    if (node.collective >= 0 && plan.collectives[node.collective].kind == CollectiveKind::PointToPoint &&
        node.sends.empty()) {
      // Eager pipeline p2p (Megatron batches isend/irecv): the receive ends when every send of
      // its pair has landed; the send side runs below like a plain transfer.
      for (int m : plan.collectives[node.collective].nodes)
        if (m != node.id && !plan.nodes[m].sends.empty()) wait_for(actor, m);
      return;
    }
    const bool eager = node.collective < 0 || plan.collectives[node.collective].kind == CollectiveKind::PointToPoint;
    if (eager) {
      if (node.sends.empty()) return;
      comm_host_work();
      host_work(costs.comm_work(node).before_s);
      std::vector<sg4::CommPtr> comms;
      for (std::size_t i = 0; i < node.sends.size(); ++i) {
        const auto& t = node.sends[i];
        if (t.peer == original(node.rank) || whole_bytes(t.bytes) == 0) continue;
        comms.push_back(sg4::Comm::sendto_async(hosts[original(node.rank)], hosts[t.peer], whole_bytes(t.bytes)));
      }
      activities += static_cast<std::int64_t>(comms.size());
      flows_started += static_cast<std::int64_t>(comms.size());
      auto noise = comms.empty() ? nullptr : start_interference(node);
      sg4::Comm::wait_all(comms);
      if (noise) noise->cancel();
      host_work(costs.comm_work(node).after_s);
      return;
    }
    comm_host_work();
    host_work(costs.comm_work(node).before_s);
    const int cid = node.collective;
    CollectiveState& cs = collectives[cid];
    const auto& c = plan.collectives[cid];
    if (++cs.arrived < static_cast<int>(c.nodes.size())) {
      next_waiter[actor] = cs.waiter_head;
      cs.waiter_head = actor;
      blocked_on[actor] = node.id;
      block(actor);
      blocked_on[actor] = -1;
      resume();
    } else {
      release_collective(cid);
    }
    if (node.slot == schedule::Slot::Dispatch && node.phase == schedule::Phase::Forward &&
        c.kind == CollectiveKind::AllToAll)
      exchange_counts(node, c);
    const int me = member_index[node.id];
    const auto first = cs.flows.begin() + cs.offsets[me];
    const auto last = cs.flows.begin() + cs.offsets[me + 1];
    // A compute node that carries a collective (the CP ring of attention, the TP re-gather of a
    // backward) runs its kernels while its transfers fly and ends when both are done.
    sg4::ExecPtr overlapped;
    if (node.stream == Stream::Compute) {
      const double seconds = node_seconds(node);
      if (seconds > 0) {
        ++activities;
        sg4::Host* where = shared_cpu != nullptr ? shared_cpu : sg4::this_actor::get_host();
        overlapped = sg4::this_actor::exec_init(seconds * where->get_speed());
        overlapped->set_host(where);
        overlapped->start();
      }
    }
    auto noise = (first != last || pending_in[node.id] > 0) ? start_interference(node) : nullptr;
    run_flows(first, last, true);
    if (pending_in[node.id] > 0) {
      in_waiter[node.id] = actor;
      blocked_on[actor] = node.id;
      block(actor);
      blocked_on[actor] = -1;
      resume();
    }
    if (noise) noise->cancel();
    if (overlapped) overlapped->wait();
    if (++cs.finished == static_cast<int>(c.nodes.size())) {
      cs.flows = {};
      cs.offsets = {};
    }
    host_work(costs.comm_work(node).after_s);
  }

  void run_stream(int actor, const std::vector<int>& nodes) {
    for (int n : nodes) {
      const Node& node = plan.nodes[n];
      bool blocked = false;
      for (int d : node.deps) {
        // A dependency on a member of the node's own all-to-all or all-reduce is the rendezvous
        // itself, not an ordering edge (waiting for it first would deadlock).
        if (node.collective >= 0 && plan.nodes[d].collective == node.collective &&
            plan.collectives[node.collective].kind != CollectiveKind::PointToPoint)
          continue;
        if (!done[d]) {
          blocked = true;
          wait_for(actor, d);
        }
      }
      if (blocked) resume();
      start[n] = now();
      if (node.stream == Stream::Compute && node.collective < 0) run_compute(node);
      else run_comm(actor, node);
      finish(n);
    }
  }
};

ReplayState* g_current = nullptr;

void install_deadlock_hook() {
  // Static signals outlive engines (toolchain.md 4): register once for the whole process.
  static std::once_flag once;
  std::call_once(once, [] {
    sg4::Engine::on_deadlock_cb([] {
      if (g_current != nullptr) g_current->deadlocked = true;
    });
  });
}

std::string deadlock_message(const ReplayState& st) {
  std::int64_t stuck = 0;
  for (auto d : st.done) stuck += d ? 0 : 1;
  std::string msg = std::to_string(stuck) + " of " + std::to_string(st.plan.nodes.size()) +
                    " plan nodes never finished";
  int shown = 0;
  for (std::size_t i = 0; i < st.plan.nodes.size() && shown < 3; ++i) {
    if (st.done[i] || st.start[i] < 0) continue;  // report nodes that started and hung
    const Node& n = st.plan.nodes[i];
    msg += (shown++ == 0 ? "; stuck: " : ", ") + std::string("rank ") + std::to_string(n.rank) + " '" + n.label() + "'";
  }
  return msg;
}

// The plan with the transfers a measured run recorded (CostModel::instances) in place of the
// builder's estimate, so that a replay of another schedule of the same run carries the measured
// routing. Returns nullopt when no instance has transfers.
std::optional<Plan> with_measured_sends(const Plan& plan, const CostModel& costs) {
  if (std::none_of(costs.instances.begin(), costs.instances.end(), [](const auto& kv) { return kv.second.has_sends; }))
    return std::nullopt;
  Plan out = plan;
  for (Node& node : out.nodes) {
    if (node.stream != Stream::Comm || node.sends.empty()) continue;
    const MeasuredInstance* inst = costs.instance_for(node);
    if (inst == nullptr || !inst->has_sends) continue;
    for (const auto& t : inst->sends)
      if (t.peer < 0 || t.peer >= out.layout_ranks())
        throw SimError(SimErrorCode::BadCosts, "instance '" + CostModel::instance_key(node) + "' sends to rank " +
                                                   std::to_string(t.peer) + " of a plan with " +
                                                   std::to_string(out.layout_ranks()));
    node.sends = inst->sends;
  }
  return out;
}

}  // namespace

namespace detail {

RawReplay simulate(const Plan& plan, const PlatformSpec& platform, const CostModel& costs,
                   const ReplayOptions& options) {
  RawReplay raw;
  try {
    const int world = static_cast<int>(plan.ranks.size());
    static std::mutex one_engine_at_a_time;
    std::lock_guard lock(one_engine_at_a_time);
    xbt_log_control_set("root.thres:critical");  // before the Engine, or config lines leak
    std::vector<std::string> args = engine_args();
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int argc = static_cast<int>(args.size());
    install_deadlock_hook();
    sg4::Engine engine(&argc, argv.data());

    ReplayState st(plan, platform, costs, options);
    const std::vector<char> needed = st.touched_nodes();
    st.hosts = build_platform(engine, platform, plan.layout_ranks(), plan.folded(), &needed);
    if (!platform.xml_file.empty()) check_routes(plan, st.hosts, platform.xml_file);
    if (platform.host_cores > 0) st.shared_cpu = engine.host_by_name_or_null(kSharedCpuHost);
    const std::size_t n_nodes = plan.nodes.size();
    st.done.assign(n_nodes, 0);
    st.start.assign(n_nodes, -1);
    st.end.assign(n_nodes, -1);
    st.waiter_head.assign(n_nodes, -1);
    st.member_index.assign(n_nodes, -1);
    st.pending_in.assign(n_nodes, 0);
    st.in_waiter.assign(n_nodes, -1);
    st.collectives.resize(plan.collectives.size());
    for (const auto& c : plan.collectives)
      for (std::size_t i = 0; i < c.nodes.size(); ++i) st.member_index[c.nodes[i]] = static_cast<int>(i);

    st.work_cache.assign(plan.works.size() * 4, std::nan(""));
    const int n_actors = kStreamsPerRank * world;
    st.next_waiter.assign(n_actors, -1);
    st.blocked_on.assign(n_actors, -1);
    for (int a = 0; a < n_actors; ++a) st.wake.push_back(sg4::Semaphore::create(0));
    st.origin_s = sg4::Engine::get_clock();
    for (const auto& rp : plan.ranks) {
      for (Stream s : {Stream::Compute, Stream::Comm, Stream::Dp}) {
        std::vector<int> mine;
        for (int n : rp.issue)
          if (plan.nodes[n].stream == s) mine.push_back(n);
        if (mine.empty() && s == Stream::Dp) continue;
        const int actor = kStreamsPerRank * rp.rank + static_cast<int>(s);
        sg4::Actor::create(std::string(schedule::to_string(s)) + std::to_string(rp.rank), st.hosts[st.original(rp.rank)],
                           [&st, actor, nodes = std::move(mine)] { st.run_stream(actor, nodes); });
      }
    }
    g_current = &st;
    engine.run();
    g_current = nullptr;
    if (st.deadlocked || std::find(st.done.begin(), st.done.end(), 0) != st.done.end()) {
      raw.failed = true;
      raw.error = SimErrorCode::Deadlock;
      raw.message = deadlock_message(st);
      return raw;
    }
    for (std::size_t i = 0; i < n_nodes; ++i) {
      st.start[i] -= st.origin_s;
      st.end[i] -= st.origin_s;
    }
    raw.wait.assign(n_nodes, 0);
    for (std::size_t c = 0; c < plan.collectives.size(); ++c)
      for (int n : plan.collectives[c].nodes)
        raw.wait[n] = std::max(0.0, st.collectives[c].release_s - st.origin_s - st.start[n]);
    raw.start = std::move(st.start);
    raw.end = std::move(st.end);
    raw.activities = st.activities;
    raw.flows = st.flows_started;
    raw.a2a_model = st.used_pairwise && st.used_aggregated ? "mixed"
                    : st.used_aggregated                   ? "aggregated"
                                                           : "pairwise";
  } catch (const SimError& e) {
    g_current = nullptr;
    raw.failed = true;
    raw.error = e.code();
    raw.message = e.detail();
  }
  return raw;
}

}  // namespace detail

namespace {

// Skewed routing shows as unequal all-to-all sends.
bool skewed_sends(const Plan& plan) {
  for (const auto& c : plan.collectives)
    if (c.kind == CollectiveKind::AllToAll && skewed_collective(plan, c)) return true;
  return false;
}

}  // namespace

schedule::FoldPlacement fold_placement(const PlatformSpec& platform) {
  return {platform.gpus_per_node, platform.xml_file.empty() && platform.host_cores == 0,
          platform.oversubscription == 1.0};
}

void place(schedule::ScheduleOptions& options, const PlatformSpec& platform) {
  const schedule::FoldPlacement p = fold_placement(platform);
  options.nvlink_domain = p.gpus_per_node;
  options.uniform_fabric = p.uniform_fabric;
  options.full_bisection = p.full_bisection;
}

SimResult replay(const Plan& plan_in, const PlatformSpec& platform_in, const CostModel& costs,
                 const ReplayOptions& options) {
  validate_plan(plan_in);
  const std::optional<Plan> measured = with_measured_sends(plan_in, costs);
  const Plan& plan = measured ? *measured : plan_in;
  const int world = plan.layout_ranks();
  const PlatformSpec platform = sized_for(platform_in, world);
  // The plan says whether it is folded (schedule/fold.hpp decides, the builder records). Folding
  // needs the preset fabric, GPUs of their own (on the CPU backend's shared cores every rank's
  // work competes) and ranks placed alike: a folded plan that would not be exact here (built for
  // another platform, or read from a file) is refused.
  if (plan.folded() &&
      !schedule::folding_exact(schedule::layout_sizes(plan), fold_placement(platform), skewed_sends(plan)))
    throw SimError(SimErrorCode::BadPlan,
                   "a folded plan replays only where folding is exact (a preset platform with GPUs of their own, "
                   "rank groups placed alike on its nodes), not on '" + platform.name + "'; build it unfolded (--no-fold)");
  detail::RawReplay raw = options.isolate ? detail::simulate_isolated(plan, platform, costs, options)
                                          : detail::simulate(plan, platform, costs, options);
  if (raw.failed) throw SimError(raw.error, raw.message);

  std::vector<int> stands_for, original;
  for (const auto& rp : plan.ranks) {
    stands_for.push_back(rp.stands_for);
    original.push_back(plan.original_rank(rp.rank));
  }
  SimResult result;
  result.folded_ranks = plan.folded() ? plan.global_ranks() : 0;
  result.summary = detail::summarize_replay(plan, raw.start, raw.end, stands_for, world);
  result.summary.activities = raw.activities;
  result.summary.flows = raw.flows;
  result.a2a_model = raw.a2a_model;
  if (options.keep_timeline) {
    result.timeline = detail::build_timeline(plan, raw.start, raw.end, raw.wait, original);
    if (plan.folded()) result.timeline.metadata["folded"] = std::to_string(plan.global_ranks()) + " of " + std::to_string(world) + " ranks simulated";
    result.timeline.metadata["platform"] = platform.name;
    result.timeline.metadata["gpus"] = std::to_string(world);
    result.timeline.metadata["a2a_model"] = result.a2a_model;
    result.timeline.metadata["interference_factor"] = std::to_string(costs.interference_factor);
    result.timeline.metadata["schedule"] = plan.schedule;
    result.timeline.metadata["pattern"] = plan.pattern;
  }
  return result;
}

}  // namespace ht::sim
