// What a training run will need in memory, before any tensor is allocated, so that
// `--hidden 1000000000` or a checkpoint manifest with such a config is refused with the figures
// instead of ending in std::bad_alloc (or the OOM killer) minutes later. One memory model serves
// `train` and `simulate`: the schedule's walk over the plan the run executes (schedule/memory.hpp:
// the layers each rank holds, each layer's activations from its first forward node to its last
// node, the microbatches in flight), with the engine's own MemoryModel: float32 weights, gradients
// and two AdamW moments (16 bytes a parameter, no master copy, no sharded optimizer), and per layer
// and microbatch what the CPU layers cache (an upper bound: attention keeps its probabilities, GDN
// its per-token states) plus, in the executor, the staged gradients of the layer's parameters.
#pragma once

#include <cstdint>

#include "ht/engine/config.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/memory.hpp"

namespace ht::engine {

// The engine's MemoryModel over the dims the engine maps its config to (exec::schedule_dims).
// `staged_gradients`: the executor's per-(layer, microbatch) gradient staging (HybridModel has none).
schedule::MemoryModel engine_memory_model(const schedule::ModelDims& dims, bool staged_gradients);

struct MemoryEstimate {
  double parameters = 0;   // elements held, summed over the ranks
  double bytes = 0;        // every rank at its own peak, summed
  double activations = 0;  // the activation part of `bytes`
};

// A run of `plan` (an executor's: its ranks live in this process), summed over its ranks.
// `host_copy_bytes`: what the host keeps per parameter beside it (the device executor: each held
// parameter's value and gradient, 8 bytes, the checkpoints' and the optimizer's view).
MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const schedule::ModelDims& dims,
                                        const schedule::ParallelConfig& config, const schedule::Plan& plan,
                                        bool staged_gradients, double host_copy_bytes = 0);

// The one-rank trainer (HybridModel: one batch of batch x seq, forward then backward): the same
// walk over its one-rank sequential plan.
MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch,
                                        int seq);

// Tokens of one batch (batch x seq) the engine accepts: int indexing stays exact far beyond it.
inline constexpr std::int64_t kMaxBatchTokens = std::int64_t{1} << 24;

// Throws EngineError(BadConfig) when batch x seq passes kMaxBatchTokens (before any estimate:
// the sizes may not even describe a model then).
void check_batch_tokens(int batch, int seq);

// Throws EngineError(BadConfig) naming the estimate and the limit (io::available_memory_bytes)
// when the run cannot fit (check_batch_tokens comes first: before the estimate is made).
void check_training_memory(const MemoryEstimate& estimate, const patterns::ParsedPattern& pattern, int batch, int seq);

}  // namespace ht::engine
