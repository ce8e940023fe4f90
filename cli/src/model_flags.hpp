// Command-line flags shared by the commands that build a plan (plan, simulate, train): model
// dimensions (a preset, an optional --model FILE.json, then one flag per field overriding both),
// the parallel layout and the schedule options. Header-only so that it adds no source file to the
// CLI target; it keeps CLI11 out of the schedule library.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "command.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/model_card.hpp"

namespace ht::cli {

struct ModelFlags {
  std::string preset = "default";  // "default" or "tiny"
  std::string model_file;          // a shipped model card's name, a card file or a JSON object of ModelDims fields
  std::map<std::string, int> values;
  std::map<std::string, CLI::Option*> options;

  // Preset, then the card or file, then every field flag given on the command line.
  schedule::ModelCard resolve_card() const {
    schedule::ModelCard card;
    card.dims = preset == "tiny" ? schedule::tiny_model() : schedule::ModelDims{};
    if (!model_file.empty()) card = schedule::resolve_model(model_file);
    for (const schedule::ModelField& f : schedule::model_fields()) {
      const auto it = options.find(std::string(f.name));
      if (it != options.end() && it->second->count() > 0) card.dims.*f.member = values.at(std::string(f.name));
    }
    schedule::validate(card.dims);
    return card;
  }
  schedule::ModelDims resolve() const { return resolve_card().dims; }
};

// Registers --preset, --model and one --<field> flag per ModelDims field (e.g. --hidden,
// --num-experts); `flags` must outlive the parse.
inline void add_model_flags(CLI::App& sub, ModelFlags& flags) {
  sub.add_option("--preset", flags.preset, "model size preset before --model and field flags")
      ->check(CLI::IsMember({"default", "tiny"}))
      ->capture_default_str();
  sub.add_option("--model", flags.model_file,
                 "a shipped model card (`hybrid-twin models` lists them), a card FILE.json, or model dimensions as a "
                 "JSON object of fields (FILE.json)");
  for (const schedule::ModelField& f : schedule::model_fields()) {
    std::string flag = "--" + std::string(f.name);
    for (char& c : flag)
      if (c == '_') c = '-';
    int& slot = flags.values[std::string(f.name)];
    slot = 0;
    flags.options[std::string(f.name)] =
        sub.add_option(flag, slot, std::string(f.help))->group("Model dimensions");
  }
}

inline void add_parallel_flags(CLI::App& sub, schedule::ParallelConfig& config) {
  sub.add_option("--ep", config.ep, "expert-parallel size (EP groups split the dp ranks)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--pp", config.pp, "pipeline-parallel size")->capture_default_str()->group("Parallel layout");
  sub.add_option("--vpp", config.vpp, "virtual stages per pipeline rank (0 = none; needs '|' segments)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--dp", config.dp, "data-parallel size per pipeline stage (multiple of --ep)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--microbatches", config.microbatches, "microbatches per step")
      ->capture_default_str()->group("Parallel layout");
}

// The parallel layout of the what-if commands (plan, simulate): Megatron's grid and batch sizes,
// gradient sync, recomputation (megatron-parallel.md). `train` keeps add_parallel_flags: the
// engine runs EP, PP and DP only.
struct LayoutFlags {
  schedule::LayoutRequest request;
  schedule::ParallelConfig base;  // options beyond the grid
  int mbs = 0;
  std::string recompute = "none";
  std::string recompute_method;  // "" (not given), uniform or block
  int recompute_num_layers = -1;
  std::string offload = "none";  // --offload-modules
  std::string grad_sync = "megatron";
  bool no_distributed_optimizer = false, no_overlap_grad_reduce = false, no_overlap_param_gather = false;
  bool fsdp = false;
  bool grad_reduce_bf16 = false;
  double bucket_elements = 0;
  CLI::Option* dp_option = nullptr;
  CLI::Option* microbatches_option = nullptr;

  // The layout, with dims.micro_batch set from --mbs.
  schedule::ParallelConfig resolve(schedule::ModelDims& dims) const {
    if (mbs > 0) dims.micro_batch = mbs;
    schedule::ParallelConfig c = base;
    c.recompute = schedule::parse_recompute(recompute);
    if ((!recompute_method.empty() || recompute_num_layers >= 0) && !c.recompute.full)
      throw UsageError("--recompute-method and --recompute-num-layers apply to --recompute full");
    if (recompute_method == "block") {
      if (recompute_num_layers < 0) throw UsageError("--recompute-method block needs --recompute-num-layers N");
      c.recompute.block_layers = recompute_num_layers;
    } else if (recompute_num_layers == 0) {
      throw UsageError("--recompute-method uniform needs --recompute-num-layers N >= 1 (layers per recomputed unit)");
    } else if (recompute_num_layers > 1) {
      c.recompute.uniform_layers = recompute_num_layers;
    }
    c.offload = schedule::parse_offload(offload);
    if (grad_sync == "megatron") {
      c.optimizer.sync = schedule::GradSync::Megatron;
      c.optimizer.distributed = !no_distributed_optimizer;
      c.optimizer.overlap_grad_reduce = !no_overlap_grad_reduce;
      c.optimizer.overlap_param_gather = c.optimizer.distributed && c.optimizer.overlap_grad_reduce && !no_overlap_param_gather;
    } else if (no_distributed_optimizer || no_overlap_grad_reduce || no_overlap_param_gather) {
      throw UsageError("--no-distributed-optimizer and --no-overlap-* apply to --grad-sync megatron");
    }
    if (fsdp) {
      if (grad_sync != "megatron") throw UsageError("--fsdp needs --grad-sync megatron");
      // Megatron-FSDP shards the optimizer itself and gathers each unit as it runs: the
      // distributed optimizer's bucket gathers and reductions are not used.
      c.optimizer.fsdp = true;
      c.optimizer.distributed = false;
      c.optimizer.overlap_grad_reduce = false;
      c.optimizer.overlap_param_gather = false;
    }
    if (grad_reduce_bf16) {
      if (grad_sync != "megatron") throw UsageError("--grad-reduce-in-bf16 needs --grad-sync megatron");
      c.optimizer.grad_reduce_bf16 = true;
    }
    c.optimizer.bucket_elements = bucket_elements;
    schedule::LayoutRequest r = request;
    if (dp_option == nullptr || dp_option->count() == 0) r.dp = 0;
    if (microbatches_option == nullptr || microbatches_option->count() == 0) r.microbatches = 0;
    return schedule::resolve_layout(r, dims, c);
  }
};

inline void add_layout_flags(CLI::App& sub, LayoutFlags& f) {
  const char* group = "Parallel layout (Megatron's grid)";
  auto& r = f.request;
  r.dp = 1;
  r.microbatches = 1;
  sub.add_option("--gpus", r.gpus, "world size; dp = gpus / (tp x cp x pp) (default: the smallest layout holding the other flags)")
      ->check(kPositive)->group(group);
  sub.add_option("--tp", r.tp, "tensor-parallel size (with sequence parallelism)")->capture_default_str()->group(group);
  sub.add_option("--cp", r.cp, "context-parallel size")->capture_default_str()->group(group);
  sub.add_option("--pp", r.pp, "pipeline-parallel size")->capture_default_str()->group(group);
  sub.add_option("--vpp", r.vpp, "virtual stages per pipeline rank (0 = none)")->capture_default_str()->group(group);
  sub.add_option("--ep", r.ep, "expert-parallel size (folds over tp x cp x dp)")->capture_default_str()->group(group);
  sub.add_option("--etp", r.etp, "expert tensor-parallel size")->capture_default_str()->group(group);
  f.dp_option = sub.add_option("--dp", r.dp, "data-parallel size (instead of --gpus)")->check(kPositive)->group(group);
  f.microbatches_option =
      sub.add_option("--microbatches", r.microbatches, "microbatches per step and data-parallel rank (instead of --gbs)")
          ->check(kPositive)
          ->group(group);
  sub.add_option("--gbs", r.gbs, "global batch in sequences; microbatches = gbs / (dp x mbs)")->check(kPositive)->group(group);
  sub.add_option("--mbs", f.mbs, "sequences per microbatch (the model's micro_batch)")->check(kPositive)->group(group);
  sub.add_flag("--account-for-embedding", f.base.split.account_embedding,
               "count the embedding as a layer in the pipeline split (pipe-less patterns)")
      ->group(group);
  sub.add_flag("--account-for-loss", f.base.split.account_loss,
               "count the loss as a layer in the pipeline split (pipe-less patterns)")
      ->group(group);
  sub.add_option("--decoder-first-pipeline-num-layers,--first-stage-layers", f.base.split.first_stage_layers,
                 "layers on the first pipeline rank; the middle ranks split the rest evenly (pipe-less patterns)")
      ->check(kNonNegative)->group(group);
  sub.add_option("--decoder-last-pipeline-num-layers,--last-stage-layers", f.base.split.last_stage_layers,
                 "layers on the last pipeline rank (pipe-less patterns)")
      ->check(kNonNegative)->group(group);
  const char* train = "Training step (Megatron)";
  sub.add_option("--recompute", f.recompute,
                 "activation recomputation: none, full, or modules core_attn,layernorm,moe_act,mlp,moe,shared_experts,"
                 "mla_up_proj")
      ->capture_default_str()->group(train);
  sub.add_option("--recompute-method", f.recompute_method,
                 "with --recompute full: uniform (units of --recompute-num-layers layers, default 1, each keeping "
                 "only its input and rerun whole before its backward) or block (the first --recompute-num-layers "
                 "layers of each model chunk; the rest keep their activations)")
      ->check(CLI::IsMember({"uniform", "block"}))
      ->group(train);
  sub.add_option("--recompute-num-layers", f.recompute_num_layers,
                 "block: layers recomputed per model chunk; uniform: layers per recomputed unit (default 1)")
      ->check(kNonNegative)
      ->group(train);
  sub.add_option("--offload-modules", f.offload,
                 "fine-grained activation offloading (Megatron's --offload-modules): none, or modules attn_norm,"
                 "qkv_linear,core_attn,attn_proj,mlp_norm,expert_fc1,moe_act whose saved activations go to host memory "
                 "over the host link")
      ->capture_default_str()->group(train);
  sub.add_option("--grad-sync", f.grad_sync,
                 "megatron: DDP buckets, optimizer step, distributed optimizer; end-of-step: one all-reduce after the "
                 "backward (what the engine does)")
      ->check(CLI::IsMember({"megatron", "end-of-step"}))->capture_default_str()->group(train);
  sub.add_flag("--no-distributed-optimizer", f.no_distributed_optimizer, "plain DDP: all-reduce, full optimizer state")
      ->group(train);
  sub.add_flag("--fsdp,--use-megatron-fsdp", f.fsdp,
               "Megatron-FSDP (optim_grads_params): weights, gradients and optimizer state sharded over the "
               "data-parallel group; each layer (a bracket group is one unit) gathered before its forward and "
               "backward, the next one prefetched, its gradients reduce-scattered after its backward")
      ->group(train);
  sub.add_flag("--no-overlap-grad-reduce", f.no_overlap_grad_reduce, "reduce gradients after the whole backward")->group(train);
  sub.add_flag("--grad-reduce-in-bf16", f.grad_reduce_bf16,
               "main gradients kept and reduced in bf16 instead of fp32 (Megatron's flag; Megatron-FSDP's "
               "recommended configuration): half the bytes of every gradient reduction and of the gradient memory")
      ->group(train);
  sub.add_flag("--no-overlap-param-gather", f.no_overlap_param_gather,
               "gather parameters after the optimizer step instead of before each forward")
      ->group(train);
  sub.add_option("--ddp-bucket-size", f.bucket_elements, "DDP bucket size in elements (default max(40M, 1M x dp x cp))")
      ->check(kPositive)->group(train);
}

// The physics of a real Megatron step that shapes the twin's plan (config.hpp): the MoE
// dispatcher, the router's expected load on the busiest EP rank, TP communication overlap and the
// GEMM number format. Defaults are the twin's: a router trained with a load-balancing loss.
struct PhysicsFlags {
  std::string dispatcher = "alltoall";
  std::string routing = "aux-loss";
  double expert_load = 0;  // --expert-load: the busiest EP rank's load over the mean, given
  double expert_node_load = 0;  // --expert-node-load: the busiest node's, given
  std::string precision = "bf16";
  std::string dispatch_dtype = "bf16";
  bool tp_comm_overlap = false;
  bool cross_entropy_fusion = false;
  double memory_margin_gib = 0;  // --memory-margin: HBM kept free beyond the runtime overhead

  void apply(schedule::ScheduleOptions& o) const {
    o.dispatcher = *schedule::dispatcher_from_string(dispatcher);
    o.routing = *schedule::routing_from_string(routing);
    o.expert_load = expert_load;
    o.expert_node_load = expert_node_load;
    o.precision = *schedule::precision_from_string(precision);
    o.tp_comm_overlap = tp_comm_overlap;
    o.cross_entropy_fusion = cross_entropy_fusion;
    o.dispatch_fp8 = dispatch_dtype == "fp8";
  }
};

inline void add_physics_flags(CLI::App& sub, PhysicsFlags& f) {
  const char* group = "Step physics (Megatron options)";
  sub.add_option("--moe-dispatcher", f.dispatcher,
                 "MoE token dispatcher: alltoall, allgather, deepep (flex, DeepEP: one copy per destination rank "
                 "and node, 20 SMs) or hybridep (flex, HybridEP: 8 SMs)")
      ->check(CLI::IsMember({"alltoall", "allgather", "deepep", "hybridep"}))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--routing", f.routing,
                 "expert load of the busiest EP rank: aux-loss (a router trained with a balancing loss), "
                 "force-balance (--moe-router-force-load-balancing: uniform random top-k) or mean (every rank "
                 "exactly the mean, as the engines' plans)")
      ->check(CLI::IsMember({"aux-loss", "force-balance", "mean"}))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--expert-load", f.expert_load,
                 "the busiest EP rank's expert load over the mean, as measured from your router (hybrid-twin "
                 "expert-load reads Megatron's tokens-per-expert logs into it), instead of --routing's model: its "
                 "expert rows and what it receives are priced at it (memory stays at the mean load)")
      ->check(number_between(1, 1e6))
      ->group(group);
  sub.add_option("--expert-node-load", f.expert_node_load,
                 "the busiest node's expert load over the mean, with --expert-load and at most it (hybrid-twin "
                 "expert-load measures both): DeepEP's and HybridEP's RDMA copies follow it; default: --expert-load")
      ->check(number_between(1, 1e6))
      ->group(group);
  sub.add_flag("--tp-comm-overlap", f.tp_comm_overlap,
               "TP communication overlap (Transformer Engine userbuffers): TP all-gathers and reduce-scatters "
               "run beside the GEMMs that consume or produce them")
      ->group(group);
  sub.add_flag("--cross-entropy-fusion,--cross-entropy-loss-fusion", f.cross_entropy_fusion,
               "the loss over the vocabulary in fused kernels (Megatron's --cross-entropy-loss-fusion); without it, "
               "Megatron's default: separate PyTorch passes over fp32 logits")
      ->group(group);
  sub.add_option("--moe-dispatch-dtype", f.dispatch_dtype,
                 "number format of the forward dispatch on the wire: bf16 (Megatron's) or fp8 (DeepSeek's, DeepEP's "
                 "benchmarks: one fp32 scale per 128 elements)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--precision", f.precision, "GEMM number format: bf16, fp8 (Hopper/Blackwell) or mxfp8 (Blackwell)")
      ->check(CLI::IsMember({"bf16", "fp8", "mxfp8"}))
      ->capture_default_str()
      ->group(group);
  sub.add_option("--memory-margin", f.memory_margin_gib,
                 "GiB of HBM to keep free on every GPU beyond the counted runtime overhead (CUDA context, NCCL "
                 "and DeepEP buffers): allocator fragmentation, spikes; a layout fits when tensors + overhead + "
                 "margin <= HBM")
      ->check(number_between(0, 1e6))
      ->capture_default_str()
      ->group(group);
}

// Schedule switches. Overlap and delayed weight gradients default to on whenever ep > 1 (the
// overlap needs expert parallelism), and can be forced either way.
struct ScheduleFlags {
  schedule::ScheduleOptions options;
  bool overlap_on = false, overlap_off = false, delay_on = false, delay_off = false;

  // Overlap defaults to on when ep > 1, except for patterns with MTP depths: hybrid MTP never
  // overlaps (reference section 4, rule O3), so their default is the sequential schedule and
  // only an explicit --overlap meets the rule's error.
  schedule::ScheduleOptions resolve(const schedule::ParallelConfig& config, int mtp_depths = 0) const {
    if (overlap_on && overlap_off) throw UsageError("--overlap and --no-overlap contradict each other");
    if (delay_on && delay_off) throw UsageError("--delay-wgrad and --no-delay-wgrad contradict each other");
    schedule::ScheduleOptions o = options;
    o.overlap = overlap_on || (!overlap_off && config.ep > 1 && mtp_depths == 0);
    // Delayed weight gradients come with the overlap, except under Megatron-FSDP, which refuses them.
    o.delay_wgrad = delay_on || (!delay_off && o.overlap && !config.optimizer.fsdp);
    return o;
  }
};

// The four switches the engine and the twin share (--overlap, --no-overlap, --delay-wgrad,
// --no-delay-wgrad).
inline void add_overlap_flags(CLI::App& sub, ScheduleFlags& flags) {
  const char* group = "Schedule";
  sub.add_flag("--overlap", flags.overlap_on,
               "combined 1F1B with EP all-to-all overlap (default: on when ep > 1 and the pattern has no MTP)")
      ->group(group);
  sub.add_flag("--no-overlap", flags.overlap_off, "sequential schedule")->group(group);
  sub.add_flag("--delay-wgrad", flags.delay_on,
               "delayed weight-gradient (W) nodes (default: on with overlap, but not with --fsdp, which refuses them)")
      ->group(group);
  sub.add_flag("--no-delay-wgrad", flags.delay_off, "weight gradients inside backward")->group(group);
}

inline void add_schedule_flags(CLI::App& sub, ScheduleFlags& flags) {
  const char* group = "Schedule";
  add_overlap_flags(sub, flags);
  sub.add_flag("--early-attn-release", flags.options.early_attn_release,
               "run pre_dispatch backward before the forward mlp (step 8)")
      ->group(group);
  sub.add_flag("--cuda-graphs", flags.options.cuda_graphs, "CUDA graphs (rejected with overlap)")->group(group);
  sub.add_option("--routing-skew", flags.options.routing_skew,
                 "Zipf exponent of expert load across EP ranks (0 = balanced)")
      ->capture_default_str()
      ->group(group);
}

}  // namespace ht::cli
