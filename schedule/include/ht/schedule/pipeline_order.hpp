// The order in which one pipeline rank runs the forward and backward passes of its model chunks
// (reference sections 3.1, 3.6 microbatch level, 5.2 item 7): warm-up forwards, steady 1F1B steps,
// cool-down backwards. With overlap a steady step runs one forward and one backward *combined*;
// without it they run one after the other.
#pragma once

#include <optional>
#include <vector>

#include "ht/schedule/config.hpp"

namespace ht::schedule {

// One model chunk of one microbatch.
struct ChunkRef {
  int microbatch = 0;
  int vp_stage = 0;
  bool operator==(const ChunkRef&) const = default;
};

// One call of the chunk-level run: a forward, a backward, or both combined.
struct PipelineStep {
  std::optional<ChunkRef> forward;
  std::optional<ChunkRef> backward;
  bool operator==(const PipelineStep&) const = default;
};

// Warm-up forwards of pipeline rank `pp_rank`, following Megatron's get_pp_rank_microbatches:
// pp = 1: 1; no virtual stages: pp - rank - 1; virtual stages: 2*(pp - rank - 1) +
// (vpp - 1)*pp; one more when overlapping with pp > 1 (so the forward and backward of every
// combined step are independent); capped at the total microbatch count of the rank.
int warmup_microbatches(const ParallelConfig& config, int pp_rank, bool overlap);

// The k-th forward / backward of a rank in virtual-microbatch order: microbatches advance in
// groups of pp through the chunks (forward chunks ascending, backward chunks descending).
ChunkRef forward_chunk(const ParallelConfig& config, int k);
ChunkRef backward_chunk(const ParallelConfig& config, int k);

// All steps of one rank in host order.
std::vector<PipelineStep> pipeline_steps(const ParallelConfig& config, int pp_rank, bool overlap);

}  // namespace ht::schedule
