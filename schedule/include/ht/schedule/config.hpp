// Inputs of the schedule builder besides the pattern: model dimensions (what each layer costs),
// the parallel layout (how many ranks and microbatches) and schedule options (which schedule).
// Model dimensions load from and save to a small JSON object so `--model FILE.json` works.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  // Details real model cards need (defaults keep the behaviour of the fields above):
  int gdn_key_heads = 0;         // GDN query/key heads; 0 = gdn_num_heads (the value heads)
  int gdn_key_head_dim = 0;      // GDN query/key head size; 0 = gdn_head_dim
  int attn_output_gate = 0;      // 1: attention has a sigmoid output gate (q_proj doubles)
  int qk_norm = 0;               // 1: RMSNorm on queries and keys (2 x head_dim weights)
  int rotary_percent = 100;      // share of the head dimension that RoPE rotates
  int tied_embeddings = 0;       // 1: the output layer shares the embedding's weights
  int shared_expert_gate = 0;    // 1: the shared expert's output passes a sigmoid gate (h weights)
  int gated_ffn = 1;             // 1: SwiGLU FFNs (3 matrices); 0: non-gated (2 matrices, e.g. ReLU^2)
  int mla_rope_head_dim = 0;     // MLA decoupled RoPE key/query size (DeepSeek qk_rope_head_dim)
  int mla_v_head_dim = 0;        // MLA value head size; 0 = head_dim
  int mla_qk_head_dim = 0;       // MLA no-RoPE query/key head size; 0 = head_dim
  int moe_latent_size = 0;       // latent MoE: routed experts work in this width (h -> latent ->
                                 // h projections around them); 0 = none (experts see hidden)
  int mtp_shared_weights = 0;    // 1: all MTP depths share one set of weights (counted once)
  // Group-limited routing (DeepSeek's n_group / topk_group, Megatron's --moe-router-num-groups /
  // --moe-router-group-topk): experts form router_groups groups and a token's top_k experts come
  // from its router_group_topk best groups; 0 = no groups.
  int router_groups = 0;
  int router_group_topk = 0;

  bool operator==(const ModelDims&) const = default;

  // Tokens in one microbatch on one rank.
  double tokens() const { return double(micro_batch) * double(seq_len); }
  int gdn_qk_heads() const { return gdn_key_heads > 0 ? gdn_key_heads : gdn_num_heads; }
  int gdn_qk_head_dim() const { return gdn_key_head_dim > 0 ? gdn_key_head_dim : gdn_head_dim; }
  int mla_v_dim() const { return mla_v_head_dim > 0 ? mla_v_head_dim : head_dim; }
  int mla_qk_dim() const { return mla_qk_head_dim > 0 ? mla_qk_head_dim : head_dim; }  // no-RoPE part
  int moe_width() const { return moe_latent_size > 0 ? moe_latent_size : hidden; }  // what experts see
  // FFN matrices per unit of intermediate size: 3 for SwiGLU (gate, up, down), 2 otherwise.
  int ffn_matrices() const { return gated_ffn ? 3 : 2; }
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
  int max = 1 << 30;        // largest legal value
};
std::span<const ModelField> model_fields();

// Selective recomputation modules, by Megatron's names (reference megatron-parallel.md 6.2).
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1u << 0,       // core attention of '*'/'W' (a fused kernel saves ~nothing)
  kRecomputeLayernorm = 1u << 1,      // MLA input norm and the MoE pre-MLP norm
  kRecomputeMoeAct = 1u << 2,         // routed experts' activation
  kRecomputeMlp = 1u << 3,            // the whole dense MLP '-' (its TP collectives replay)
  kRecomputeMoe = 1u << 4,            // the whole MoE layer (its all-to-alls replay; not with overlap)
  kRecomputeSharedExperts = 1u << 5,  // the shared expert
  kRecomputeMlaUpProj = 1u << 6,      // MLA up-projections and RoPE
};
struct RecomputeName {
  std::string_view name;
  RecomputeModule module;
};
std::span<const RecomputeName> recompute_names();
// "full", "none" or a comma list of module names -> (full, modules); throws BadConfig naming the
// unknown module and listing the known ones.
struct Recompute {
  bool full = false;       // every layer keeps only its input; its forward reruns before backward
  unsigned modules = 0;    // RecomputeModule bits (selective)
  // --recompute-method block --recompute-num-layers N: with `full`, only the first N decoder layers
  // of each model chunk recompute (Megatron's block method); -1 = every layer (uniform, N = 1).
  int block_layers = -1;
  // --recompute-method uniform --recompute-num-layers N: with `full`, each model chunk's decoder
  // layers form units of N consecutive layers; a unit keeps only its input and its backward reruns
  // the whole unit's forward first, so its N layers' activations are live together (Megatron's
  // uniform method; N = 1 is every layer on its own).
  int uniform_layers = 1;
  bool any() const { return full || modules != 0; }
  bool has(RecomputeModule m) const { return (modules & m) != 0; }
  // Whether the decoder layer at `index` of its model chunk (MTP depths: mtp) recomputes fully.
  bool full_at(int index, bool mtp) const { return full && (block_layers < 0 || (!mtp && index < block_layers)); }
  bool operator==(const Recompute&) const = default;
};
Recompute parse_recompute(std::string_view text);
std::string to_string(const Recompute& r);

// Fine-grained activation offloading (Megatron's --fine-grained-activation-offloading
// --offload-modules): the listed modules' saved activations go to host memory over the GPU's host
// link after their forward (a D2H copy on a stream of its own) and come back one layer ahead of
// their backward (H2D). Megatron's module names; fused_group_mlp and gdp_qkv are not modelled.
enum OffloadModule : unsigned {
  kOffloadAttnNorm = 1u << 0,   // the attention's input norm: the layer input
  kOffloadQkvLinear = 1u << 1,  // the QKV (MLA: down-projection) input: the norm output
  kOffloadCoreAttn = 1u << 2,   // query, key and value of the core attention
  kOffloadAttnProj = 1u << 3,   // the output projection's input (the core's output); with core_attn
  kOffloadMlpNorm = 1u << 4,    // the pre-MLP norm's input (dense '-' and MoE 'E')
  kOffloadExpertFc1 = 1u << 5,  // the routed experts' fc1 input: the permuted tokens
  kOffloadMoeAct = 1u << 6,     // the routed experts' activation input: fc1's output
};
struct OffloadName {
  std::string_view name;
  OffloadModule module;
};
std::span<const OffloadName> offload_names();
struct Offload {
  unsigned modules = 0;
  bool any() const { return modules != 0; }
  bool has(OffloadModule m) const { return (modules & m) != 0; }
  bool operator==(const Offload&) const = default;
};
// "none" or a comma list of module names; throws BadConfig naming an unknown one.
Offload parse_offload(std::string_view text);
std::string to_string(const Offload& o);

// How gradients reach the optimizer (megatron-parallel.md 4).
//  EndOfStep: one all-reduce of the stage's gradients per data-parallel group after the last
//    backward, on the comm stream, in the activation dtype (what the engine's executor does);
//  Megatron: DDP buffers in bf16 parameters and fp32 gradients, cut into buckets; all-reduce, or
//    reduce-scatter + parameter all-gather with the distributed optimizer; buckets launched as they
//    fill during the last microbatch's backward (overlap_grad_reduce) or after it; parameter
//    all-gathers before the forward that needs them (overlap_param_gather) or after the
//    optimizer step; and the optimizer step itself. Collectives run on a stream of their own.
enum class GradSync : std::uint8_t { EndOfStep, Megatron };
struct OptimizerConfig {
  GradSync sync = GradSync::EndOfStep;
  bool distributed = false;           // --use-distributed-optimizer
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;  // needs distributed and overlap_grad_reduce
  double bucket_elements = 0;         // 0 = Megatron's default max(40M, 1M x dp x cp)
  // --use-megatron-fsdp (optim_grads_params): parameters, gradients and optimizer state sharded
  // over the data-parallel group; each unit (a logical layer: a bracket group is one unit; the
  // embedding; the output layer) all-gathered before its forward and again before its backward,
  // the next unit's gather prefetched, its gradients reduce-scattered once its backward ends.
  bool fsdp = false;
  // --grad-reduce-in-bf16 (Megatron-FSDP's recommended configuration): the main gradients kept,
  // accumulated and reduced in bf16 instead of fp32 (grad_bytes() 2 instead of 4).
  bool grad_reduce_bf16 = false;
  double grad_bytes() const { return grad_reduce_bf16 ? 2.0 : 4.0; }
  bool operator==(const OptimizerConfig&) const = default;
};

// How pipe-less patterns split over pp x vpp stages (megatron-parallel.md 5.1): evenly over the
// logical layers, with the embedding and/or the loss counted as one layer each when asked; or
// unevenly, with the first and/or last pipeline rank given its own layer count and the middle
// ranks splitting the rest evenly (each count divided evenly over the rank's vpp chunks).
struct PipelineSplit {
  bool account_embedding = false;  // --account-for-embedding-in-pipeline-split
  bool account_loss = false;       // --account-for-loss-in-pipeline-split
  int first_stage_layers = -1;     // --decoder-first-pipeline-num-layers; -1 = not set
  int last_stage_layers = -1;      // --decoder-last-pipeline-num-layers; -1 = not set
  bool uneven() const { return first_stage_layers >= 0 || last_stage_layers >= 0; }
  bool operator==(const PipelineSplit&) const = default;
};

// Parallel layout, Megatron's grid (megatron-parallel.md 1). World = tp x cp x dp x pp ranks.
// Dense layers see the grid tp-cp-dp-pp, rank r has tp = r % tp, cp = (r / tp) % cp,
// dp = (r / (tp cp)) % dp, pp = r / (tp cp dp). MoE layers fold their own grid over the same
// ranks, etp x ep x edp = tp x cp x dp: etp = r % etp, ep = (r / etp) % ep,
// edp = (r / (etp ep)) % edp, pp as above. With tp = cp = etp = 1 this is rank = pp * dp + dp_rank
// and EP groups are consecutive dp ranks.
struct ParallelConfig {
  int ep = 1;            // expert-parallel size
  int pp = 1;            // pipeline-parallel size
  int vpp = 0;           // virtual stages per pipeline rank; 0 = not set (no interleaving)
  int dp = 1;            // data-parallel size (dense grid; excludes cp)
  int microbatches = 1;  // microbatches per step (per data-parallel rank)
  int tp = 1;            // tensor-parallel size (with sequence parallelism)
  int cp = 1;            // context-parallel size
  int etp = 1;           // expert tensor-parallel size
  OptimizerConfig optimizer;
  Recompute recompute;
  Offload offload;  // fine-grained activation offloading
  PipelineSplit split;

  int global_ranks() const { return tp * cp * dp * pp; }
  int stage_ranks() const { return tp * cp * dp; }  // ranks of one pipeline stage
  int edp() const { return stage_ranks() / (ep * etp); }
  int model_chunks() const { return vpp > 0 ? vpp : 1; }
  bool operator==(const ParallelConfig&) const = default;
};

// Coordinates of one global rank on both grids.
struct RankCoords {
  int tp = 0, cp = 0, dp = 0, pp = 0;  // dense grid
  int etp = 0, ep = 0, edp = 0;        // expert grid (same pp)
  bool operator==(const RankCoords&) const = default;
};
RankCoords rank_coords(const ParallelConfig& c, int rank);

// Process groups, as Megatron builds them; members are global ranks in ascending order.
enum class Group : std::uint8_t {
  Tp,    // tensor parallel: TP/SP all-gathers and reduce-scatters
  Cp,    // context parallel: attention ring, Mamba/GDN head all-to-alls
  Dp,    // dense gradients: dp x cp ranks (Megatron's dp-cp group)
  Pp,    // pipeline p2p
  Ep,    // expert parallel: token all-to-alls
  Etp,   // expert tensor parallel
  Edp,   // expert gradients
};
std::string_view to_string(Group g);
std::optional<Group> group_from_string(std::string_view s);
std::vector<int> group_members(const ParallelConfig& c, int rank, Group g);

// How MoE tokens travel (megatron-parallel.md 9.1, physics.md 2.4): Megatron's
// --moe-token-dispatcher-type allgather / alltoall, or flex with the DeepEP or HybridEP backend.
enum class Dispatcher : std::uint8_t {
  AllGather,  // NCCL all-gather of every token to the EP group, reduce-scatter back (fp32)
  AllToAll,   // NCCL all-to-all of top_k copies per token
  DeepEP,     // one copy per destination rank (NVLink), per destination node (RDMA, then NVLink)
  HybridEP,   // DeepEP's copies, fewer SMs
};
std::string_view to_string(Dispatcher d);
std::optional<Dispatcher> dispatcher_from_string(std::string_view s);
// SMs the dispatcher's own communication kernels hold while they run (0: NCCL's, a platform
// property): DeepEP 20 (Megatron's --moe-flex-dispatcher-num-sms default), HybridEP 8 (the SM
// budget DeepEP's hybrid-ep branch measures with).
int dispatcher_sms(Dispatcher d);

// The expert load an EP rank gets (costs.hpp, expert_load_factor): exactly the mean (what the
// engines' plans assume), the expected busiest rank of a router trained with a load-balancing
// loss, or of forced balance (--moe-router-force-load-balancing: uniform random top-k).
enum class Routing : std::uint8_t { Mean, AuxLoss, ForceBalance };
std::string_view to_string(Routing r);
std::optional<Routing> routing_from_string(std::string_view s);

// Number format of the GEMMs and of the tensors Megatron sends in it (physics.md 6).
enum class Precision : std::uint8_t { Bf16, Fp8, Mxfp8 };
std::string_view to_string(Precision p);
std::optional<Precision> precision_from_string(std::string_view s);

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
  // Build only the ranks that stand for others (fold.hpp): one per pipeline stage, or per
  // (stage, EP rank) under routing skew, where folding is exact on the placement below
  // (nvlink_domain GPUs a node, fold.hpp builds_folded). For the twin; the engines run unfolded.
  bool fold = false;
  bool uniform_fabric = true;  // every node alike: a preset fabric whose GPUs compute on their own
  bool full_bisection = true;  // no leaf oversubscription
  // The physics of a real Megatron step (the twin's; the engines keep the defaults): the MoE
  // dispatcher, the expected expert load of the busiest EP rank, TP communication overlap
  // (Transformer Engine's userbuffers) and the GEMM number format.
  Dispatcher dispatcher = Dispatcher::AllToAll;
  int nvlink_domain = 8;  // GPUs per node (DeepEP's one RDMA copy per destination node)
  Routing routing = Routing::Mean;
  // The busiest EP rank's expert load over the mean as the user measured or assumes it (>= 1;
  // e.g. from the tokens per expert Megatron logs), instead of `routing`'s model; 0 = the model.
  double expert_load = 0;
  // The busiest node's (DeepEP's and HybridEP's RDMA copies follow it, costs.hpp MoeRoute), given
  // (>= 1, at most expert_load); 0 = expert_load when given, else the routing model's.
  double expert_node_load = 0;
  bool tp_comm_overlap = false;
  // --cross-entropy-loss-fusion: the loss over the vocabulary in fused kernels. Off (Megatron's
  // default): PyTorch's separate passes over fp32 logits (costs.hpp output_work).
  bool cross_entropy_fusion = false;
  Precision precision = Precision::Bf16;
  // The forward dispatch in FP8 with one fp32 scale per 128 elements (DeepSeek's and DeepEP's
  // benchmarks; Megatron's DeepEP path sends bf16, physics.md 6); everything else stays bf16.
  bool dispatch_fp8 = false;
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
