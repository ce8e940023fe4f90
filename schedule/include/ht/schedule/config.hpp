// Inputs of the schedule builder besides the pattern: model dimensions (what each layer costs),
// the parallel layout (how many ranks and microbatches) and schedule options (which schedule).
// Model dimensions load from and save to a small JSON object so `--model FILE.json` works.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace ht::schedule {

// Sizes of one model. Defaults describe a mid-sized hybrid (hidden 2048, 64 experts of which 6
// are active); tiny_model() is the preset the tests and the CPU engine use.
struct ModelDims {
  int hidden = 2048;
  int ffn_hidden = 8192;         // dense MLP ('-') intermediate size
  int num_heads = 16;            // attention query heads (*, W, and the MLA family)
  int num_kv_heads = 8;          // GQA key/value heads of '*' and 'W'
  int head_dim = 128;
  int mamba_state = 128;         // SSM state size per head (d_state)
  int mamba_head_dim = 64;
  int mamba_num_heads = 64;      // d_inner = mamba_num_heads * mamba_head_dim
  int mamba_groups = 8;          // B/C groups
  int conv_kernel = 4;           // causal depthwise conv width (Mamba and GDN)
  int gdn_num_heads = 16;
  int gdn_head_dim = 128;
  int num_experts = 64;
  int top_k = 6;
  int moe_ffn_hidden = 1024;     // per-expert intermediate size
  int shared_expert_ffn = 0;     // shared expert intermediate size; 0 = no shared expert
  int vocab = 131072;
  int seq_len = 4096;
  int micro_batch = 1;           // sequences per microbatch
  int bytes_per_element = 2;     // 2 = bf16 activations, weights and all-to-all payload
  int q_lora_rank = 1536;        // MLA low-rank query projection
  int kv_lora_rank = 512;        // MLA low-rank key/value projection
  int window = 1024;             // sliding window of 'W' (also the key budget of 'D')

  bool operator==(const ModelDims&) const = default;

  // Tokens in one microbatch on one rank.
  double tokens() const { return double(micro_batch) * double(seq_len); }
};

// A small model for tests and the CPU engine: every layer type is cheap but no size is 1.
ModelDims tiny_model();

// One integer field of ModelDims, for JSON and command-line flags without repeating the list.
struct ModelField {
  using Member = int ModelDims::*;  // (an alias: nvcc's host pass misreads the bare declarator)
  std::string_view name;    // JSON key and flag name ("hidden" -> --hidden)
  Member member;
  int min;                  // smallest legal value
  std::string_view help;
};
std::span<const ModelField> model_fields();

// Parallel layout. Global ranks = pp * dp, numbered rank = pp_rank * dp + dp_rank. EP groups are
// consecutive subsets of the dp ranks of one pipeline stage (dp % ep == 0): ep_group =
// dp_rank / ep, ep_rank = dp_rank % ep.
struct ParallelConfig {
  int ep = 1;            // expert-parallel size
  int pp = 1;            // pipeline-parallel size
  int vpp = 0;           // virtual stages per pipeline rank; 0 = not set (no interleaving)
  int dp = 1;            // data-parallel size per pipeline stage
  int microbatches = 1;  // microbatches per step (per data-parallel rank)

  int global_ranks() const { return pp * dp; }
  int model_chunks() const { return vpp > 0 ? vpp : 1; }
  bool operator==(const ParallelConfig&) const = default;
};

// Which schedule to build. Defaults are Megatron's: no overlap, no delayed weight gradients.
struct ScheduleOptions {
  bool overlap = false;             // combined 1F1B: EP all-to-all overlapped with compute
  bool delay_wgrad = false;         // split weight gradients into separate W nodes (needs overlap)
  bool cuda_graphs = false;         // only used to reject overlap + graphs (O2)
  bool early_attn_release = false;  // step 8 instead of step 11 of reference section 3.6
  // Routing skew s >= 0: every rank sends its routed tokens to EP rank d with share
  // (d+1)^-s / sum_j (j+1)^-s (Zipf-like: low EP ranks hold the hot experts). s = 0 is balanced.
  double routing_skew = 0.0;
  // The final PR rejects any MTP pattern under overlap (O3). Setting this false models the
  // 2026-07-27 code, which schedules MTP depths but still applies O7 (depth <= 1) and O8.
  bool reject_hybrid_mtp = true;
  bool operator==(const ScheduleOptions&) const = default;
};

// Range checks; throw ScheduleError (BadModel / BadConfig) naming the field and value.
void validate(const ModelDims& dims);
void validate(const ParallelConfig& config);
void validate(const ScheduleOptions& options);

// JSON object with one integer per ModelField. Reading accepts a subset of the keys (the rest keep
// their defaults) and rejects unknown keys, non-integers and out-of-range values (BadModel).
std::string model_dims_to_json(const ModelDims& dims);
ModelDims model_dims_from_json(std::string_view text);
ModelDims load_model_dims(const std::filesystem::path& path);  // Io / BadModel
void save_model_dims(const std::filesystem::path& path, const ModelDims& dims);  // atomic

}  // namespace ht::schedule
