// The twin proper: replays one schedule::Plan on a simulated cluster and returns the predicted
// timeline and its headline numbers. What-if flow: build_plan -> replay (here) -> traces
// (Chrome trace, SVG) and the CLI report.
//
// How the plan maps onto SimGrid (one Engine per call):
//  - every GPU stream is one actor on the GPU's host, running its nodes in issue order; a node
//    first waits for its deps (a semaphore per actor, woken by the finishing node), so the
//    per-microbatch chain and cross-rank p2p order of the plan are reproduced exactly;
//  - compute nodes execute cost_model seconds on the GPU host;
//  - comm nodes that belong to a collective rendezvous: the flows start once every member has
//    arrived, and a member finishes when its own flows have arrived and every flow addressed to it
//    has arrived (an NCCL kernel ends when its sends and receives are done). The member's span
//    starts when it arrives, so waiting for late peers shows up as communication time, as it
//    does in a real profile (args "wait_s" holds the waiting part);
//  - pipeline p2p (CollectiveKind::PointToPoint) is eager, as Megatron's batched isend/irecv:
//    the send's flow starts when its comm stream reaches it, without waiting for the receive to
//    be posted, and the receive ends when the bytes have landed. (A strict rendezvous deadlocks
//    on interleaved plans whose stages send before they receive on one serial comm stream.)
//  - all-to-all flows: pairwise (one flow per peer, Node::sends as written) or aggregated (per
//    GPU one flow carrying all its intra-node bytes to a neighbour on its node and one carrying
//    all its inter-node bytes to a GPU on the next node of the group). Aggregated keeps the
//    per-port load of a balanced all-to-all on a full-bisection fabric with O(1) flows per GPU
//    instead of O(EP); pairwise is exact for skewed routing. Auto: pairwise up to
//    `pairwise_max_group` members and for skewed collectives (per-peer bytes differing by more
//    than 1 %), aggregated otherwise;
//  - reduce-scatters, all-gathers and all-reduces with per-peer sends (data-parallel buckets, TP/SP
//    and expert-TP collectives) run as NCCL's rings, one channel per GPU of a node: each member
//    sends its ring volume (the sum of its sends) to its successor, (g-1)/g of it over NVLink and
//    1/g through its NIC to the same position on the next node of the group (g = members on its
//    node), so a collective across nodes runs at the node's aggregate NIC bandwidth;
//    all-reduces without sends use a plain ring: each member sends 2(n-1)/n x mem_bytes to its
//    successor, i.e. the closed form 2(n-1)/n x bytes / bw + latency on a uniform ring;
//  - interference: while a GPU's comm node has flows in flight, a background execution with
//    share weight (factor - 1) runs on the GPU host, so a compute node gets 1/factor of the GPU
//    (max-min sharing) and slows down by exactly `factor` for the overlapped part.
// Replays run in a forked child by default (ReplayOptions::isolate) so that every replay starts at
// simulated time 0; in-process replays are serialised (SimGrid has one engine at a time) and
// report times as differences from the replay start, since SimGrid never resets its clock.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ht/schedule/config.hpp"
#include "ht/schedule/fold.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::sim {

// A forward dispatch first tells every peer how many rows it will receive (Megatron's all-to-all
// dispatcher exchanges tokens_per_expert before the tokens; so does the engine): one message of
// this size to each peer, a round of link latency before the payload.
inline constexpr double kDispatchCountBytes = 64;

enum class A2aModel { Auto, Pairwise, Aggregated };
std::string_view to_string(A2aModel m);
A2aModel parse_a2a_model(std::string_view text);  // "auto" | "pairwise" | "aggregated"

struct ReplayOptions {
  A2aModel a2a = A2aModel::Auto;
  int pairwise_max_group = 8;    // Auto: pairwise flows for collectives with at most this many ranks
  bool keep_timeline = true;     // false: summary only (large what-ifs: spans cost ~0.5 KB each)
  // Run SimGrid in a forked child process. SimGrid never resets its clock between engines, so
  // in-process replays see rounding that depends on what ran before; isolated replays always
  // start at time 0 and give bit-identical results for the same input. false: run in-process
  // (debuggers; results then match only to ~1e-15 relative).
  bool isolate = true;
  std::function<void(double done_fraction)> progress;  // called every ~5 % of nodes, from the replay
};

// Times are seconds of one training step; per-GPU quantities are means over the plan's GPUs.
//  step_time_s          first node start to last node end
//  compute_busy_s       time the compute stream is busy
//  a2a_total_s          time inside all-to-all nodes (dispatch, combine) on the comm stream
//  a2a_exposed_s        the part of a2a_total_s during which the compute stream is idle
//  a2a_hidden_fraction  1 - exposed / total (1 when there is no all-to-all, as traces::hidden_fraction)
//  bubble_fraction      1 - compute_busy_s / step_time_s: the share of GPU time the compute
//                       stream does no compute -- pipeline fill/drain, exposed communication and
//                       the TP/CP collectives it runs in line. For a 1F1B pipeline without
//                       communication it is (PP-1)/(m+PP-1).
//  tp_comm_s, cp_comm_s TP/SP all-gathers and reduce-scatters, context-parallel all-to-alls: run
//                       on the compute stream, so always exposed (compute_busy_s excludes them)
//  dp_comm_s            the dp stream's gradient reductions and parameter all-gathers (Megatron's
//                       DDP); dp_exposed_s the part of it during which the compute stream is idle
//  optimizer_s          the optimizer step
struct Summary {
  double step_time_s = 0;
  double compute_busy_s = 0;
  double max_compute_busy_s = 0;  // the busiest GPU's compute stream (a lower bound on the step)
  double a2a_total_s = 0;
  double a2a_exposed_s = 0;
  double a2a_hidden_fraction = 0;
  double p2p_total_s = 0;         // pipeline sends/receives on the comm stream
  double allreduce_s = 0;         // gradient all-reduce (end-of-step, on the comm stream)
  double tp_comm_s = 0;
  double cp_comm_s = 0;
  double dp_comm_s = 0;
  double dp_exposed_s = 0;
  double optimizer_s = 0;
  double layer_compute_s = 0;     // compute busy in decoder layers alone (no embedding, output, optimizer)
  double bubble_fraction = 0;
  int gpus = 0;
  std::int64_t activities = 0;    // SimGrid executions and flows started
  std::int64_t flows = 0;
  bool operator==(const Summary&) const = default;
};

struct SimResult {
  traces::Timeline timeline;  // device = global rank, stream 0 compute / 1 comm / 2 dp; folded: representatives only
  Summary summary;
  std::string a2a_model;      // what was used ("pairwise", "aggregated" or "mixed")
  int folded_ranks = 0;       // ranks simulated when folding applied (0: every rank was)
};

// Throws SimError: BadPlan (inconsistent plan or platform too small), BadPlatform, Deadlock.
SimResult replay(const schedule::Plan& plan, const PlatformSpec& platform, const CostModel& costs,
                 const ReplayOptions& options = {});

// Checks the plan's internal consistency (ids, ranks, issue lists, deps, collectives, sends).
void validate_plan(const schedule::Plan& plan);

// What folding needs to know of a platform (schedule/fold.hpp folding_exact): GPUs per node,
// whether its nodes are alike (a preset fabric, GPUs computing on their own: not an XML file, not
// the CPU backend's shared cores) and whether it has full bisection.
schedule::FoldPlacement fold_placement(const PlatformSpec& platform);
// Puts the platform's placement on schedule options (nvlink_domain, uniform_fabric,
// full_bisection): what the builder's folding decision and DeepEP's per-node copies read.
void place(schedule::ScheduleOptions& options, const PlatformSpec& platform);


}  // namespace ht::sim
