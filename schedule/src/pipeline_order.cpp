// Warm-up counts and step order of the pipeline schedules (see pipeline_order.hpp).
#include "ht/schedule/pipeline_order.hpp"

#include <algorithm>

namespace ht::schedule {
namespace {

int total_chunks(const ParallelConfig& c) { return c.microbatches * c.model_chunks(); }

// Position of virtual microbatch k: which group of pp microbatches, which chunk, which member.
ChunkRef virtual_microbatch(const ParallelConfig& c, int k) {
  if (c.vpp == 0) return {k, 0};
  const int group = c.pp;
  const int per_round = group * c.model_chunks();
  const int round = k / per_round;
  const int in_round = k % per_round;
  return {round * group + in_round % group, in_round / group};
}

}  // namespace

int warmup_microbatches(const ParallelConfig& c, int pp_rank, bool overlap) {
  int warmup = 1;
  if (c.pp > 1) {
    if (c.vpp == 0) {
      warmup = c.pp - pp_rank - 1;
    } else {
      warmup = 2 * (c.pp - pp_rank - 1) + (c.model_chunks() - 1) * c.pp;
    }
    if (overlap) warmup += 1;
  }
  return std::min(warmup, total_chunks(c));
}

ChunkRef forward_chunk(const ParallelConfig& c, int k) { return virtual_microbatch(c, k); }

ChunkRef backward_chunk(const ParallelConfig& c, int k) {
  ChunkRef r = virtual_microbatch(c, k);
  r.vp_stage = c.model_chunks() - 1 - r.vp_stage;
  return r;
}

std::vector<PipelineStep> pipeline_steps(const ParallelConfig& c, int pp_rank, bool overlap) {
  const int total = total_chunks(c);
  std::vector<PipelineStep> steps;
  if (c.pp == 1 && !overlap) {
    // Sequential: F then B of every microbatch.
    for (int k = 0; k < total; ++k) {
      steps.push_back({forward_chunk(c, k), std::nullopt});
      steps.push_back({std::nullopt, backward_chunk(c, k)});
    }
    return steps;
  }
  const int warmup = warmup_microbatches(c, pp_rank, overlap);
  const int remaining = total - warmup;
  for (int k = 0; k < warmup; ++k) steps.push_back({forward_chunk(c, k), std::nullopt});
  for (int k = 0; k < remaining; ++k) {
    if (overlap) {
      steps.push_back({forward_chunk(c, warmup + k), backward_chunk(c, k)});
    } else {
      steps.push_back({forward_chunk(c, warmup + k), std::nullopt});
      steps.push_back({std::nullopt, backward_chunk(c, k)});
    }
  }
  for (int k = remaining; k < total; ++k) steps.push_back({std::nullopt, backward_chunk(c, k)});
  return steps;
}

}  // namespace ht::schedule
