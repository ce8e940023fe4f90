// Training memory estimate (see memory_estimate.hpp).
#include "ht/engine/memory_estimate.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "ht/engine/error.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/process_memory.hpp"
#include "ht/schedule/costs.hpp"

namespace ht::engine {
namespace {

double gib(double bytes) { return bytes / double(io::kGiB); }

// Per token and physical layer: the residual, norm, branch input/output and gradients (about 16
// hidden-wide vectors) plus the layer's widest intermediate, all float32.
double layer_activation_bytes(char symbol, const ModelConfig& c, double batch, double seq) {
  const double tokens = batch * seq;
  double wide = 16.0 * c.hidden;
  switch (symbol) {
    case '*':
    case 'W':
    case '+':
      wide += 4.0 * c.num_heads * std::max(c.head_dim, c.mla_qk_head_dim + c.mla_qk_pos_head_dim);
      return 4 * (tokens * wide + 2.0 * batch * c.num_heads * seq * seq);  // scores and their softmax
    case 'M':
      wide += 4.0 * c.mamba_num_heads * c.mamba_head_dim;
      return 4 * tokens * (wide + double(c.mamba_num_heads) * c.mamba_head_dim * c.mamba_state_dim);  // states
    case 'G':
      wide += 4.0 * c.gdn_num_v_heads * c.gdn_head_dim_v;
      return 4 * tokens * (wide + double(c.gdn_num_v_heads) * c.gdn_head_dim_qk * c.gdn_head_dim_v);
    case '-': return 4 * tokens * (wide + 4.0 * c.ffn_hidden);
    case 'E':
      return 4 * tokens * (wide + double(c.num_experts) + 4.0 * c.moe_topk * c.moe_ffn_hidden +
                           4.0 * c.moe_shared_ffn_hidden);
    default: return 4 * tokens * wide;
  }
}

std::string figure(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

}  // namespace

MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch,
                                        int seq, int replicas) {
  const schedule::ModelDims d = exec::schedule_dims(cfg, batch, seq);
  std::string symbols = pattern.flattened_symbols();
  for (int k = 0; k < pattern.mtp_depths; ++k) symbols += pattern.mtp;
  MemoryEstimate e;
  e.parameters = schedule::embedding_params(d) + schedule::output_params(d) +
                 pattern.mtp_depths * schedule::mtp_extra_params(d);
  double activations = 4.0 * batch * seq * double(cfg.vocab_size) * (3 + pattern.mtp_depths);  // logits
  for (char s : symbols) {
    try {
      e.parameters += schedule::non_expert_params(s, d);
    } catch (const std::exception&) {
      e.parameters += 4.0 * d.hidden * d.hidden;  // a symbol the engine refuses later anyway
    }
    if (s == 'E') e.parameters += cfg.num_experts * schedule::expert_params_per_expert(d);
    activations += layer_activation_bytes(s, cfg, batch, seq);
  }
  e.bytes = replicas * (4.0 * 4.0 * e.parameters + activations);
  return e;
}

void check_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch, int seq,
                           int replicas) {
  const double tokens = double(batch) * double(seq);
  if (tokens > double(kMaxBatchTokens))
    throw EngineError(ErrorCode::BadConfig, "batch " + std::to_string(batch) + " x seq " + std::to_string(seq) + " = " +
                                                figure(tokens) + " tokens per step, more than the limit of " +
                                                std::to_string(kMaxBatchTokens));
  const MemoryEstimate e = estimate_training_memory(pattern, cfg, batch, seq, replicas);
  const double available = io::available_memory_bytes();
  if (e.bytes > available)
    throw EngineError(ErrorCode::BadConfig,
                      "training '" + pattern.text + "' needs about " + figure(gib(e.bytes)) + " GiB (" +
                          figure(e.parameters) + " parameters with gradients and AdamW moments, plus activations of " +
                          std::to_string(batch) + " x " + std::to_string(seq) + " tokens" +
                          (replicas > 1 ? ", " + std::to_string(replicas) + " replicas" : std::string()) +
                          "), more than the " + figure(gib(available)) +
                          " GiB this process may use; reduce the model sizes, --batch or --seq");
}

}  // namespace ht::engine
