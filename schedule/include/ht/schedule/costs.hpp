// Cost model of plan nodes: floating-point operations and memory traffic of every slot, bytes of
// every transfer, and parameter counts for the gradient all-reduce. Pure closed forms of the
// model dimensions, so the twin can scale them and the tests can recompute them by hand.
//
// Conventions (forward, T = micro_batch * seq_len tokens on one rank):
//  - a GEMM of T x K by K x N costs 2*T*K*N flops, reads K*N weights and T*K inputs, writes T*N;
//  - attention core: 4*T*keys*heads*head_dim (scores + values), keys = (seq+1)/2 causal average;
//    'W' and 'D' attend at most `window` keys, 'C' compresses keys 4x, 'H' 128x;
//  - Mamba2: in_proj/out_proj GEMMs, conv 2*T*channels*kernel, SSD scan 6*T*d_inner*d_state;
//  - GDN: in_proj/out_proj GEMMs, conv on q,k,v, delta rule 6*T*heads*head_dim^2;
//  - MoE: router 2*T*hidden*experts, experts 6*copies*hidden*moe_ffn (SwiGLU), copies = tokens
//    routed to this rank (T*top_k when balanced), shared expert 6*T*hidden*shared_ffn;
//  - output layer 2*T*hidden*vocab plus 5*T*vocab for softmax cross-entropy.
// Backward: without delayed wgrad 2x forward (input and weight gradients); with it, B carries the
// input gradients (delayable GEMMs once, everything else twice) and W the delayable GEMMs once.
#pragma once

#include <vector>

#include "ht/schedule/config.hpp"
#include "ht/schedule/layer_shape.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule {

// Forward work of one slot, before it is split into F, B and W nodes.
struct SlotWork {
  double weight_gemm_flops = 0;  // GEMMs whose weight gradient may be delayed to a W node
  double other_flops = 0;        // everything else (attention core, scans, router, output layer)
  double weight_bytes = 0;       // parameters read
  double activation_bytes = 0;   // activations read and written
  SlotWork& operator+=(const SlotWork& o);
  bool operator==(const SlotWork&) const = default;
};

struct NodeCost {
  double flops = 0;
  double mem_bytes = 0;
  bool operator==(const NodeCost&) const = default;
};

// Cost of one phase of a slot (see the backward convention above).
NodeCost phase_cost(const SlotWork& work, Phase phase, bool delay_wgrad);

// Forward work of one layer symbol ('-' is the dense MLP; 'E' is not a symbol here: see below).
SlotWork symbol_work(char symbol, const ModelDims& dims);
// Pre-MLP norm, router and shared expert of an 'E' terminal (runs in pre_dispatch).
SlotWork moe_preprocess_work(const ModelDims& dims);
// Routed experts: `copies` token copies landed on this rank, which holds `local_experts`.
SlotWork expert_work(const ModelDims& dims, double copies, int local_experts);
// MTP embedding + eh_proj (pre_dispatch) and final norm (mtp_post).
SlotWork mtp_pre_work(const ModelDims& dims);
SlotWork mtp_post_work(const ModelDims& dims);
SlotWork embedding_work(const ModelDims& dims);
SlotWork output_work(const ModelDims& dims);  // final norm + output layer + loss

// Work of a compute slot of a layer plan on EP rank `ep_rank` (routing skew moves expert load).
SlotWork slot_work(const LayerShape& shape, Slot slot, const ModelDims& dims, int ep, int ep_rank,
                   double routing_skew);

// Share of every rank's routed tokens that goes to EP rank d: (d+1)^-s / sum_j (j+1)^-s.
std::vector<double> routing_shares(int ep, double routing_skew);
// Routed payload of one rank per layer and microbatch: T * top_k * hidden * bytes.
double routed_payload_bytes(const ModelDims& dims);
// Token copies processed by the experts of EP rank `ep_rank`: ep * T * top_k * share[ep_rank].
double routed_copies(const ModelDims& dims, int ep, int ep_rank, double routing_skew);
// Bytes EP rank `from` sends to EP rank `to` (from != to) in a dispatch or combine node.
// Dispatch forward and combine backward move tokens from their owner to the experts
// (payload * share[to]); combine forward and dispatch backward move them back (payload *
// share[from]).
double a2a_bytes(const ModelDims& dims, int ep, double routing_skew, Slot slot, Phase phase,
                 int from, int to);
// Activation (forward) or activation-gradient (backward) bytes between pipeline stages.
double pipe_bytes(const ModelDims& dims);

// Parameter counts (elements). Non-expert parameters are all-reduced over data parallelism;
// expert parameters live on their EP rank.
double non_expert_params(char symbol, const ModelDims& dims);
double expert_params_per_expert(const ModelDims& dims);
double embedding_params(const ModelDims& dims);
double output_params(const ModelDims& dims);  // output layer + final norm
double mtp_extra_params(const ModelDims& dims);  // eh_proj + enorm + hnorm + final norm

}  // namespace ht::schedule
