// Training memory estimate (see memory_estimate.hpp).
#include "ht/engine/memory_estimate.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "ht/engine/error.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/process_memory.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/params.hpp"

namespace ht::engine {
namespace {

double gib(double bytes) { return bytes / double(io::kGiB); }

// Float32 elements per token one physical layer's CPU caches hold: the residual, norm, branch
// input/output and gradients (about 16 hidden-wide vectors) plus the layer's widest
// intermediates; `per_sequence` gets what does not scale with the tokens (attention's T x T
// probabilities and their gradient, per sequence).
double symbol_elements(char symbol, const schedule::ModelDims& d, double* per_sequence) {
  double wide = 16.0 * d.hidden;
  const double seq = d.seq_len;
  switch (symbol) {
    case '*':
    case 'W':
    case '+':
      wide += 4.0 * d.num_heads * std::max(d.head_dim, d.mla_qk_dim() + d.mla_rope_head_dim);
      *per_sequence += 2.0 * d.num_heads * seq * seq;  // scores and their softmax
      return wide;
    case 'M':
      return wide + 4.0 * d.mamba_num_heads * d.mamba_head_dim +
             double(d.mamba_num_heads) * d.mamba_head_dim * d.mamba_state;
    case 'G':  // the delta rule's state at every token
      return wide + 4.0 * d.gdn_num_heads * d.gdn_head_dim +
             double(d.gdn_num_heads) * d.gdn_qk_head_dim() * d.gdn_head_dim;
    case '-':
      return wide + 4.0 * d.ffn_hidden;
    case 'E':
      return wide + d.num_experts + 4.0 * d.top_k * d.moe_ffn_hidden + 4.0 * d.shared_expert_ffn;
    default:
      return wide;
  }
}

std::string figure(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", v);
  return text;
}

// What the engine runs: end-of-step gradient all-reduce, every optimizer state on its rank.
schedule::ParallelConfig engine_config(schedule::ParallelConfig c) {
  c.optimizer.sync = schedule::GradSync::EndOfStep;
  return c;
}

}  // namespace

schedule::MemoryModel engine_memory_model(const schedule::ModelDims& d, bool staged_gradients) {
  schedule::MemoryModel m;
  m.weight_bytes = 4;
  m.gradient_bytes = 4;
  m.optimizer_bytes = 8;  // two AdamW moments
  m.layer = [d, staged_gradients](const std::string& symbols, bool mtp, const schedule::ParallelConfig& config,
                                  double* working) {
    double per_token = mtp ? 8.0 * d.hidden : 0.0, per_sequence = 0;  // MTP: its norms, concat and eh_proj
    for (char s : symbols) per_token += symbol_elements(s, d, &per_sequence);
    double bytes = 4.0 * (d.tokens() * per_token + d.micro_batch * per_sequence);
    if (staged_gradients) {
      const schedule::RankLayerParams p = schedule::rank_layer_params(symbols, mtp, d, config);
      bytes += 4.0 * (p.dense + p.expert);
    }
    if (working) *working = bytes;
    return bytes;
  };
  // The logits, their probabilities and their gradient in float32, and the final hidden states.
  m.output = [d](const schedule::ParallelConfig&) { return 4.0 * d.tokens() * (3.0 * d.vocab + 4.0 * d.hidden); };
  // The chunk's hidden state and its gradient.
  m.embedding = [d](const schedule::ParallelConfig&) { return 4.0 * d.tokens() * 2.0 * d.hidden; };
  return m;
}

MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const schedule::ModelDims& dims,
                                        const schedule::ParallelConfig& config, const schedule::Plan& plan,
                                        bool staged_gradients, double host_copy_bytes) {
  MemoryEstimate e;
  for (const schedule::MemoryBreakdown& m :
       schedule::rank_memory(pattern, dims, engine_config(config), plan, engine_memory_model(dims, staged_gradients))) {
    e.parameters += m.parameters;
    e.bytes += m.total();
    e.activations += m.activations;
  }
  e.bytes += host_copy_bytes * e.parameters;
  return e;
}

MemoryEstimate estimate_training_memory(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, int batch,
                                        int seq) {
  const schedule::ModelDims dims = exec::schedule_dims(cfg, batch, seq);
  const schedule::ParallelConfig one;
  const schedule::Plan plan = schedule::build_plan(pattern, dims, one, schedule::ScheduleOptions{});
  return estimate_training_memory(pattern, dims, one, plan, false);
}

void check_batch_tokens(int batch, int seq) {
  const double tokens = double(batch) * double(seq);
  if (tokens > double(kMaxBatchTokens))
    throw EngineError(ErrorCode::BadConfig, "batch " + std::to_string(batch) + " x seq " + std::to_string(seq) + " = " +
                                                figure(tokens) + " tokens per step, more than the limit of " +
                                                std::to_string(kMaxBatchTokens));
}

void check_training_memory(const MemoryEstimate& e, const patterns::ParsedPattern& pattern, int batch, int seq) {
  const double available = io::available_memory_bytes();
  if (e.bytes > available)
    throw EngineError(ErrorCode::BadConfig,
                      "training '" + pattern.text + "' needs about " + figure(gib(e.bytes)) + " GiB (" +
                          figure(e.parameters) + " parameters with gradients and AdamW moments, plus " +
                          figure(gib(e.activations)) + " GiB of activations of " + std::to_string(batch) + " x " +
                          std::to_string(seq) + " tokens" + "), more than the " + figure(gib(available)) +
                          " GiB this process may use; reduce the model sizes, --batch or --seq");
}

}  // namespace ht::engine
