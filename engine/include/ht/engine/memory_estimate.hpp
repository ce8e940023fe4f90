// What a training run will need in memory, estimated from the pattern and the sizes before any
// tensor is allocated, so that `--hidden 1000000000` or a checkpoint manifest with such a config is
// refused with the figures instead of ending in std::bad_alloc (or the OOM killer) minutes later.
// Parameter counts are the schedule's closed forms (schedule/costs.hpp, the twin's too); the
// activation term is an upper bound of what the CPU layers cache per token.
#pragma once

#include <cstdint>

#include "ht/engine/config.hpp"
#include "ht/patterns/pattern.hpp"

namespace ht::engine {

struct MemoryEstimate {
  double parameters = 0;  // elements of one model replica
  double bytes = 0;       // weights, gradients and two AdamW moments, plus activations, x replicas
};

MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch,
                                        int seq, int replicas = 1);

// Tokens of one batch (batch x seq) the engine accepts: int indexing stays exact far beyond it.
inline constexpr std::int64_t kMaxBatchTokens = std::int64_t{1} << 24;

// Throws EngineError(BadConfig) naming the estimate and the limit (io::available_memory_bytes)
// when the run cannot fit, or when batch x seq passes kMaxBatchTokens.
void check_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch, int seq,
                           int replicas = 1);

}  // namespace ht::engine
