// The schedule plan: pure data shared by the engine (which executes it), the SimGrid twin (which
// replays it) and outside tools (through its versioned JSON). A plan lists, for every rank, the
// nodes it issues in host order; each node runs on the rank's compute or comm stream.
//
// Ordering contract (reference sections 3.5, 5.2):
//  - stream order: nodes of one stream of a rank run in issue order (implicit, not in `deps`);
//  - per-microbatch chain: nodes of one (microbatch, model chunk) on a rank run in issue order
//    across both streams (the one event per chunk plan) -- listed explicitly in `deps`;
//  - cross-rank: pipeline receives depend on the matching send; the members of one collective
//    (all-to-all within an EP group, gradient all-reduce within a DP group) rendezvous -- each
//    node names its collective, and `deps` lists the producing node of a p2p transfer.
//
// Conventions of the builder (schedule/src/build_plan.cpp), additive to the contract above:
//  - a PointToPoint collective is {send, recv}; it is not a rendezvous: the send runs on the
//    sender's comm stream and the receive waits for it through `deps` (buffered send);
//  - AllToAll and AllReduce collectives are rendezvous: every member starts together;
//  - slots without work get no node (no-op comm of dense layers, empty pre_dispatch of a lone
//    '-', ...); the remaining nodes keep the slot order;
//  - GradAllReduce nodes (microbatch -1, phase Backward, symbols "non_expert" or "expert") depend
//    on the last node of every (microbatch, vp_stage) chain of their rank; mem_bytes is the
//    gradient bytes S and `sends` lists every other member with 2*S/n bytes (bandwidth-optimal
//    all-reduce volume); the expert all-reduce exists only when dp > ep;
//  - pre_process/post_process nodes have layer -1 and empty symbols.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ht/schedule/config.hpp"
#include "ht/schedule/kernels.hpp"

namespace ht::schedule {

inline constexpr int kPlanFormatVersion = 2;  // 1: no tp/cp/etp, parts, groups or works

// Compute: kernels, and the collectives Megatron runs in line with them (TP/SP all-gathers and
// reduce-scatters, context-parallel all-to-alls); Comm: the EP all-to-alls and pipeline p2p;
// Dp: the data-parallel gradient reductions and parameter all-gathers of Megatron's DDP (their
// own NCCL stream). Plans with the end-of-step all-reduce (GradSync::EndOfStep) keep it on Comm.
enum class Stream : std::uint8_t { Compute, Comm, Dp };

enum class Slot : std::uint8_t {
  PreProcess,     // embedding (first pipeline stage)
  PreDispatch,    // pre-layers of the group, then norm + router + permute when the terminal is E
  Dispatch,       // all-to-all of routed tokens (comm)
  Mlp,            // experts or dense MLP
  Combine,        // all-to-all back + weighted sum + residual (comm)
  MtpPost,        // MTP final norm (MTP layers only)
  PostProcess,    // final norm + output layer + loss (last pipeline stage)
  PipeSend,       // pipeline p2p send of activations (forward) or gradients (backward)
  PipeRecv,       // pipeline p2p receive
  GradAllReduce,  // data-parallel gradient reduction: all-reduce, or reduce-scatter under the
                  // distributed optimizer (one node per bucket with Megatron's gradient sync)
  ParamGather,    // distributed optimizer: all-gather of updated bf16 parameters (one per bucket)
  OptimizerStep,  // the optimizer update of this rank's parameters (or shard of them)
};

enum class Phase : std::uint8_t {
  Forward,
  Backward,  // input gradients (and weight gradients when they are not delayed)
  Weight,    // delayed weight gradients, owned by the slot that ran the forward
  Recompute, // activation recomputation: forward work replayed right before the backward needing it
};

// What a node does within its slot. Main is the slot's own work; the others are the tensor-,
// context- and expert-tensor-parallel collectives around a block of the slot (the block's
// symbol is in Node::symbols).
enum class Part : std::uint8_t {
  Main,
  TpGather,    // TP/SP all-gather of a block's input (forward) or output gradient (backward)
  TpScatter,   // TP/SP reduce-scatter of a block's output (forward) or input gradient (backward)
  CpExchange,  // context parallelism: Mamba/GDN head-parallel all-to-all
  EtpGather,   // expert tensor parallelism: all-gather of dispatched rows
  EtpScatter,  // expert tensor parallelism: reduce-scatter of expert outputs
};

enum class CollectiveKind : std::uint8_t { AllToAll, PointToPoint, AllReduce, AllGather, ReduceScatter };

std::string_view to_string(Stream s);
std::string_view to_string(Slot s);
std::string_view to_string(Phase p);
std::string_view to_string(CollectiveKind k);
std::string_view to_string(Part p);
// Inverses of to_string (used when reading plan JSON); nullopt for an unknown name.
std::optional<Stream> stream_from_string(std::string_view s);
std::optional<Slot> slot_from_string(std::string_view s);
std::optional<Phase> phase_from_string(std::string_view s);
std::optional<CollectiveKind> collective_kind_from_string(std::string_view s);
std::optional<Part> part_from_string(std::string_view s);

// Bytes one node sends to one peer (global rank).
struct Transfer {
  int peer = 0;
  double bytes = 0;
  bool operator==(const Transfer&) const = default;
};

struct Node {
  int id = 0;             // index into Plan::nodes
  int rank = 0;           // global rank that issues it
  Stream stream = Stream::Compute;
  Slot slot = Slot::PreDispatch;
  Phase phase = Phase::Forward;
  Part part = Part::Main;
  int microbatch = -1;    // -1 for step-level nodes (gradient all-reduce)
  int vp_stage = 0;       // model chunk on this rank
  int layer = -1;         // global logical layer index; -1 for pre/post-process and comm-only
  bool mtp = false;       // the layer is an MTP depth (layer = depth index then)
  std::string symbols;    // what the node computes, e.g. "M*E" for a [M*E] pre_dispatch
  double flops = 0;       // floating-point operations
  double mem_bytes = 0;   // device memory traffic
  std::vector<Transfer> sends;  // comm nodes: bytes to each peer
  int collective = -1;    // index into Plan::collectives, or -1
  int work = -1;          // index into Plan::works (the kernels of a compute node), or -1
  std::vector<int> deps;  // node ids that must finish first (besides stream order)

  // Stable human-readable label, e.g. "F mb3 L5 dispatch", "B mb0 L2 pre_dispatch M tp_gather".
  std::string label() const;
  bool operator==(const Node&) const = default;
};

struct Collective {
  int id = 0;
  CollectiveKind kind = CollectiveKind::AllToAll;
  Group group = Group::Ep;  // the process group it runs in (config.hpp)
  std::vector<int> nodes;  // one node per participating rank (of this plan)
  // Folded plans (fold.hpp): every original member rank, the folded ones included, in group
  // order. Empty: the members are exactly the nodes' ranks.
  std::vector<int> ranks;
  bool operator==(const Collective&) const = default;
};

struct RankPlan {
  int rank = 0;                // index in Plan::ranks (Node::rank)
  int original = -1;           // the layout's global rank it is; -1 = the same as `rank`
  int stands_for = 1;          // folded plans: ranks of the layout that behave as this one
  int pp_rank = 0;
  int ep_rank = 0;             // index inside its EP group
  int dp_rank = 0;             // data-parallel coordinate (dense grid)
  int tp_rank = 0;             // tensor-parallel coordinate
  int cp_rank = 0;             // context-parallel coordinate
  std::vector<int> issue;      // all node ids of this rank in host issue order
  bool operator==(const RankPlan&) const = default;
};

struct Plan {
  int version = kPlanFormatVersion;
  std::string schedule;        // "sequential" | "combined_1f1b" | "interleaved_1f1b"
  std::string pattern;         // full pattern text
  int pp = 1, ep = 1, dp = 1, microbatches = 1;
  // Model chunks per pipeline rank: the layout's ParallelConfig::model_chunks() (its vpp, or 1
  // without interleaving); plan files call it "vpp".
  int chunks = 1;
  int tp = 1, cp = 1, etp = 1;
  std::vector<Work> works;     // kernel lists of compute nodes (Node::work), shared by many nodes
  bool overlap = false;
  bool delay_wgrad = false;
  // What the twin needs beyond nodes: SMs the EP dispatch/combine kernels hold while they run (0:
  // NCCL's, a platform figure; DeepEP 20), and whether CUDA graphs replay the non-expert kernels
  // (no host launch cost for them). Written to JSON only when set.
  int ep_comm_sms = 0;
  bool cuda_graphs = false;
  double expert_load_factor = 1;  // the busiest EP rank's expected load over the mean (costs.hpp)
  double expert_node_load_factor = 1;  // the busiest node's, which DeepEP's RDMA copies follow
  int world = 0;                   // ranks of the layout; 0 = ranks.size(). Larger: a folded plan,
                                   // whose transfers still name the layout's ranks (fold.hpp)
  bool account_embedding = false;  // the pipeline split counted the embedding as a layer
  bool account_loss = false;       // ... and the loss
  std::vector<Node> nodes;
  std::vector<Collective> collectives;
  std::vector<RankPlan> ranks;
  bool operator==(const Plan&) const = default;

  const Node& node(int id) const { return nodes.at(static_cast<std::size_t>(id)); }
  int global_ranks() const { return static_cast<int>(ranks.size()); }  // ranks of this plan
  int layout_ranks() const { return world > 0 ? world : global_ranks(); }
  bool folded() const { return layout_ranks() != global_ranks(); }
  // The layout's rank of plan rank r.
  int original_rank(int r) const {
    const int o = ranks.at(static_cast<std::size_t>(r)).original;
    return o >= 0 ? o : r;
  }
};

}  // namespace ht::schedule
