// Cost model of plan nodes: floating-point operations and memory traffic of every slot, the
// kernels that do it (kernels.hpp), and bytes of every transfer. Pure closed forms of the model
// dimensions and the rank's shard of the work, so the twin can scale them and the tests can
// recompute them by hand. Parameter counts live in params.hpp.
//
// Conventions (forward; N = micro_batch * seq_len / cp tokens of the rank's sequence shard,
// T = N / tp the tokens it owns under sequence parallelism):
//  - a GEMM of N x K by K x N' costs 2*N*K*N' flops, reads K*N' weights and N*K inputs, writes
//    N*N'; TP-split GEMMs run on the gathered N tokens with N' (column-parallel) or K
//    (row-parallel) divided by tp; replicated ones (router, MLA down-projections) on T tokens;
//  - attention core: 4*N*keys*heads*head_dim (scores + values), keys = (seq+1)/2 causal average,
//    heads / tp per rank; under cp a rank's queries see the whole sequence's keys with the causal
//    load balancing, i.e. 1/cp of the work; 'W' and 'D' attend at most `window` keys, 'C'
//    compresses keys 4x, 'H' 128x;
//  - Mamba2: in_proj/out_proj GEMMs, conv 2*N*channels*kernel, SSD scan 6*N*d_inner*d_state
//    (per rank / tp);
//  - GDN: in_proj/out_proj GEMMs, conv on q, k, v, delta rule 6*N*value_heads*dk*dv;
//  - MoE: router 2*T*hidden*experts, experts 2*X*copies*hidden*moe_ffn (X = 3 gated, 2 not),
//    copies = tokens routed to this rank (ep*T*top_k*share), shared expert 2*X*N*hidden*shared_ffn/tp;
//  - output layer 2*N*hidden*vocab/tp plus 5*N*vocab/tp for softmax cross-entropy.
// Backward: without delayed wgrad 2x forward (input and weight gradients); with it, B carries the
// input gradients (delayable GEMMs once, everything else twice) and W the delayable GEMMs once.
#pragma once

#include <vector>

#include "ht/schedule/config.hpp"
#include "ht/schedule/kernels.hpp"
#include "ht/schedule/layer_shape.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// A rank's share of the work under the layout (megatron-parallel.md 2.3, 3.1, 9.2).
struct Shard {
  int tp = 1;   // TP-split blocks divide heads and GEMM columns; SP divides the owned tokens
  int cp = 1;   // a rank holds seq_len / cp tokens of every sequence
  int etp = 1;  // expert tensor parallelism: expert columns / etp, received rows x etp
  bool operator==(const Shard&) const = default;
};
Shard shard_of(const ParallelConfig& config);

// Forward work of one slot, before it is split into F, B and W nodes.
struct SlotWork {
  double weight_gemm_flops = 0;  // GEMMs whose weight gradient may be delayed to a W node
  double other_flops = 0;        // everything else (attention core, scans, router, output layer)
  double weight_bytes = 0;       // parameters read
  double activation_bytes = 0;   // activations read and written
  std::vector<Kernel> kernels;   // what runs (forward), for the twin's kernel cost model
  SlotWork& operator+=(const SlotWork& o);
  bool operator==(const SlotWork&) const = default;
};

struct NodeCost {
  double flops = 0;
  double mem_bytes = 0;
  bool operator==(const NodeCost&) const = default;
};

// Cost of one phase of a slot (see the backward convention above; Recompute is the forward).
NodeCost phase_cost(const SlotWork& work, Phase phase, bool delay_wgrad);

// Tokens a rank holds: of its sequence shard (N) and under sequence parallelism (T = N / tp).
double shard_tokens(const ModelDims& dims, const Shard& shard);
double owned_tokens(const ModelDims& dims, const Shard& shard);

// How routed tokens are spread (the twin's MoE physics; engines use the defaults): the Zipf skew
// across EP ranks, the expected load of the busiest EP rank over the mean (expert_load_factor;
// with skew the shares already say who is busiest, so it stays 1) and the dispatcher, which
// decides the copies on the wire and the permutation kernels around them.
struct MoeRoute {
  MoeRoute(double routing_skew = 0) : skew(routing_skew) {}  // NOLINT: a skew alone is a route
  double skew = 0;
  double load_factor = 1;
  // DeepEP/HybridEP: the busiest node's expert load over the mean. A copy bound for any rank of a
  // node crosses the NICs once, to the GPU at the sender's position there, which forwards it over
  // NVLink; so the RDMA copies a GPU receives follow its node's load (the 8 NICs share a hot
  // rank's excess), the forwarded copies and the expert rows its rank's (load_factor).
  double node_load_factor = 1;
  Dispatcher dispatcher = Dispatcher::AllToAll;
  int gpus_per_node = 8;  // DeepEP/HybridEP: the NVLink domain one RDMA copy per node serves
  bool dispatch_fp8 = false;  // the forward dispatch in FP8 (1 byte + a 4-byte scale per 128 elements)
  bool operator==(const MoeRoute&) const = default;
};

// Expected load of the busiest of `ep` ranks over the mean load, per layer and microbatch, for
// a router of kind `routing` (config.hpp). Every EP rank routes its T owned tokens to top_k of
// num_experts experts, num_experts / ep of them on each rank. Forced balance is uniform random
// top-k: a rank's load is a sum of ep T hypergeometric draws, mean T top_k, and the busiest of ep
// ranks sits z(ep) standard deviations above it (z = the expected maximum of ep standard
// normals). A router trained with a balancing loss adds a spread of expert popularity,
// coefficient of variation kRouterPopularityCv per expert (averaged over the rank's experts):
// DeepSeek's aux-loss baseline (Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing", arXiv
// 2408.15664, Table 2: 64 routed experts, top-6) keeps its busiest expert 1.52x the mean over the
// whole validation set (MaxVio_global 0.52 at 3B; 0.72 at 1B), so a spread of 0.52 / z(64) =
// 0.52 / 2.344; a microbatch's spread can only be wider than the whole set's. Mean: 1.
inline constexpr double kRouterPopularityCv = 0.222;
double expected_max_normal(int n);  // E[max of n independent standard normals]
// `ranks_pooled` > 1: the same for units of that many consecutive EP ranks (the EP ranks a node
// holds), each unit's experts pooled: the busiest of ep / ranks_pooled units.
double expert_load_factor(const ModelDims& dims, int ep, const Shard& shard, Routing routing, int ranks_pooled = 1);
// Probability that a token's top_k experts include one of `experts` given experts (uniform):
// 1 - C(E - experts, k) / C(E, k).
double hit_probability(int num_experts, int top_k, double experts);
// The same for a model's router. With group-limited routing (balanced: the router_group_topk
// groups uniformly, then top_k experts uniformly among their experts): `experts` inside one group
// are reached with (topk/G)(1 - C(c - experts, k)/C(c, k)), c = the chosen groups' experts; q
// whole groups with 1 - sum_j P(j of them chosen) C(c - j s, k)/C(c, k) (s = experts per group,
// P hypergeometric); sets that are neither fall back to the ungrouped form.
double hit_probability(const ModelDims& dims, double experts);

// Forward work of one layer symbol ('-' is the dense MLP; 'E' is not a symbol here: see below).
SlotWork symbol_work(char symbol, const ModelDims& dims, const Shard& shard = {});
// Pre-MLP norm, router and shared expert of an 'E' terminal (runs in pre_dispatch): the sum of
// the two blocks below.
SlotWork moe_preprocess_work(const ModelDims& dims, const Shard& shard = {}, const MoeRoute& route = {});
// Norm, router, the permutation before the dispatch (alltoall, allgather) and the MoE residual add.
SlotWork moe_router_work(const ModelDims& dims, const Shard& shard = {}, const MoeRoute& route = {});
SlotWork shared_expert_work(const ModelDims& dims, const Shard& shard = {}); // TP-split MLP
// Routed experts: `copies` token copies landed on this rank, which holds `local_experts`.
// With `route`, the permutations around the experts the dispatcher needs (sort by expert, unsort,
// unpermute) come with them.
SlotWork expert_work(const ModelDims& dims, double copies, int local_experts, const Shard& shard = {},
                     const MoeRoute& route = {});
// MTP embedding + eh_proj (pre_dispatch) and final norm (mtp_post).
SlotWork mtp_pre_work(const ModelDims& dims, const Shard& shard = {});
SlotWork mtp_post_work(const ModelDims& dims, const Shard& shard = {});
SlotWork embedding_work(const ModelDims& dims, const Shard& shard = {});
// Final norm, output layer and loss. The loss's memory traffic per logit: fused, one pass that
// reads and writes fp32 (8 bytes); unfused (Megatron's VocabParallelCrossEntropy as PyTorch ops,
// megatron/core/tensor_parallel/cross_entropy.py): forward .float() of the bf16 logits (2 + 4),
// max (4), subtract the max in place (8), exp in place (8), sum (4), divide in place (8); backward
// scale by the loss gradient in place (8) and the cast back to bf16 (4 + 2): 38 + 14 = 52 bytes.
// The kernel model prices an elementwise backward at twice its forward, so the unfused loss is one
// kernel of 52 / 3 bytes a logit: its forward and backward together move the 52.
SlotWork output_work(const ModelDims& dims, const Shard& shard = {}, bool fused_loss = true);
inline constexpr double kUnfusedLossBytesPerLogit = 38 + 14;
inline constexpr double kFusedLossBytesPerLogit = 8;

// Work of a compute slot of a layer plan on EP rank `ep_rank` (routing skew moves expert load).
SlotWork slot_work(const LayerShape& shape, Slot slot, const ModelDims& dims, int ep, int ep_rank,
                   const MoeRoute& route, const Shard& shard = {});

// Share of every rank's routed tokens that goes to EP rank d: (d+1)^-s / sum_j (j+1)^-s.
std::vector<double> routing_shares(int ep, double routing_skew);
// Routed payload of one rank per layer and microbatch: T * top_k * hidden * bytes.
double routed_payload_bytes(const ModelDims& dims, const Shard& shard = {});
// Token copies processed by the experts of EP rank `ep_rank`: ep * T * top_k * share[ep_rank]
// (times etp: expert tensor parallelism gathers the rows of its etp peers).
double routed_copies(const ModelDims& dims, int ep, int ep_rank, const MoeRoute& route,
                     const Shard& shard = {});
// Bytes EP rank `from` sends to EP rank `to` (from != to) in a dispatch or combine node.
// Dispatch forward and combine backward move tokens from their owner to the experts
// (payload * share[to]); combine forward and dispatch backward move them back (payload *
// share[from]).
double a2a_bytes(const ModelDims& dims, int ep, const MoeRoute& route, Slot slot, Phase phase,
                 int from, int to, const Shard& shard = {});
// The kernels of a node under a GEMM number format (physics.md 6): with fp8 or mxfp8 every
// Transformer Engine linear layer (the delayable GEMMs: not the router, not the output layer)
// runs in FP8 and first quantizes its input: a cast reading the bf16 rows once and writing them
// in FP8 twice (row-wise, and the column-wise copy Hopper's wgrad/dgrad need), 4 bytes an
// element; the backward casts the output gradient the same way (the elementwise backward).
std::vector<Kernel> with_precision(std::vector<Kernel> kernels, Precision precision);

// One rank's transfers in a dispatch or combine node over its EP group (`group`: the global
// ranks, `me`: this rank's index in it), by the route's dispatcher (megatron-parallel.md 9.1,
// physics.md 2.4):
//  - alltoall: a2a_bytes to every peer (top_k copies per token);
//  - allgather: every token to every peer (T h bytes), and back by a reduce-scatter in the
//    router's fp32 (forward combine);
//  - deepep, hybridep: one copy per destination rank inside the node (a token reaches a rank
//    with hit_probability(E, k, local experts)), one copy per destination node over RDMA to the
//    GPU of the same position there, which forwards it over NVLink to the other ranks it
//    reaches; under the symmetric layouts the twin replays, that forwarding is the same NVLink
//    traffic on the sender's own node, so it is carried by sends to the local peers.
// The way back mirrors the way out. Balanced routing only: with skew, alltoall's shares apply.
std::vector<Transfer> a2a_sends(const ModelDims& dims, const std::vector<int>& group, int me, const MoeRoute& route,
                                Slot slot, Phase phase, const Shard& shard = {});

// Activation (forward) or activation-gradient (backward) bytes between pipeline stages: the
// owned tokens' hidden states (T x hidden).
double pipe_bytes(const ModelDims& dims, const Shard& shard = {});

// Legacy parameter counts (elements) of the end-of-step all-reduce; params.hpp has the full model.
double non_expert_params(char symbol, const ModelDims& dims);
double expert_params_per_expert(const ModelDims& dims);
double embedding_params(const ModelDims& dims);
double output_params(const ModelDims& dims);  // output layer + final norm
double mtp_extra_params(const ModelDims& dims);  // eh_proj + enorm + hnorm + final norm

}  // namespace ht::schedule
