// The blocks of a compute slot under tensor and context parallelism (megatron-parallel.md 2, 3):
// each TP-split block (attention, MLA, Mamba, GDN, MLP, shared expert, MTP's eh_proj) is wrapped
// by an all-gather of its input and a reduce-scatter of its output over the TP group (sequence
// parallelism); attention exchanges key/value blocks around the CP ring, overlapped with its
// core; Mamba and GDN switch to head parallelism with all-to-alls over the CP group. Blocks of a
// slot are listed in forward order; their works add up to slot_work() of the slot. Internal to
// the plan builder.
#pragma once

#include <vector>

#include "ht/schedule/costs.hpp"

namespace ht::schedule::detail {

struct Block {
  char symbol = 0;          // layer symbol, or 'r' (norm + router), 's' (shared expert),
                            // 'm' (MTP embedding + eh_proj), 'n' (MTP final norm), 'x' (experts)
  SlotWork work;            // forward work of one rank
  bool tp_split = false;    // wrapped by TP/SP collectives (when tp > 1)
  double gather_width = 0;  // forward all-gather: elements per token (N x width gathered)
  double scatter_width = 0; // forward reduce-scatter: elements per token
  double ring_elements = 0; // CP ring: elements of K and V one rank holds (forward: (cp-1) x this)
  double cp_a2a_elements = 0;  // CP head all-to-all: elements per rank before the exchanges
};

// Blocks of a compute slot (pre_dispatch, mlp, mtp_post) of `shape` for one rank.
std::vector<Block> slot_blocks(const LayerShape& shape, Slot slot, const ModelDims& dims, int ep, int ep_rank,
                               const MoeRoute& route, const Shard& shard);

// Forward work a selective recomputation module replays for a block (empty when it does not
// apply): the core attention of '*'/'W', the norm of 'r' and of an MLA '+', the experts'
// activation ('x'), the MLA up-projections, a whole '-' (mlp) or shared expert ('s').
Block recompute_block(const Block& block, RecomputeModule module, const ModelDims& dims, const Shard& shard);

}  // namespace ht::schedule::detail
