// Model dimensions, parallel layout and schedule options: presets, range checks and the model
// JSON file (see config.hpp).
#include "ht/schedule/config.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "ht/schedule/error.hpp"
#include "enum_names.hpp"
#include "files.hpp"

namespace ht::schedule {
namespace {

constexpr std::array<ModelField, 38> kFields{{
    {"hidden", &ModelDims::hidden, 1, "hidden size"},
    {"ffn_hidden", &ModelDims::ffn_hidden, 1, "dense MLP intermediate size"},
    {"num_heads", &ModelDims::num_heads, 1, "attention query heads"},
    {"num_kv_heads", &ModelDims::num_kv_heads, 1, "attention key/value heads (GQA)"},
    {"head_dim", &ModelDims::head_dim, 1, "attention head size (MLA: the no-RoPE query/key part)"},
    {"mamba_state", &ModelDims::mamba_state, 1, "Mamba SSM state size per head"},
    {"mamba_head_dim", &ModelDims::mamba_head_dim, 1, "Mamba head size"},
    {"mamba_num_heads", &ModelDims::mamba_num_heads, 1, "Mamba heads"},
    {"mamba_groups", &ModelDims::mamba_groups, 1, "Mamba B/C groups"},
    {"conv_kernel", &ModelDims::conv_kernel, 1, "causal conv width (Mamba, GDN)"},
    {"gdn_num_heads", &ModelDims::gdn_num_heads, 1, "Gated DeltaNet (value) heads"},
    {"gdn_head_dim", &ModelDims::gdn_head_dim, 1, "Gated DeltaNet (value) head size"},
    {"num_experts", &ModelDims::num_experts, 1, "routed experts per MoE layer"},
    {"top_k", &ModelDims::top_k, 1, "experts per token"},
    {"moe_ffn_hidden", &ModelDims::moe_ffn_hidden, 1, "expert intermediate size"},
    {"shared_expert_ffn", &ModelDims::shared_expert_ffn, 0,
     "shared expert intermediate size (0 = none)"},
    {"vocab", &ModelDims::vocab, 1, "vocabulary size"},
    {"seq_len", &ModelDims::seq_len, 1, "sequence length"},
    {"micro_batch", &ModelDims::micro_batch, 1, "sequences per microbatch"},
    {"bytes_per_element", &ModelDims::bytes_per_element, 1, "bytes per element (2 = bf16)"},
    {"q_lora_rank", &ModelDims::q_lora_rank, 1, "MLA query low rank"},
    {"kv_lora_rank", &ModelDims::kv_lora_rank, 1, "MLA key/value low rank"},
    {"window", &ModelDims::window, 1, "sliding window of W (key budget of D)"},
    {"gdn_key_heads", &ModelDims::gdn_key_heads, 0, "Gated DeltaNet query/key heads (0 = gdn_num_heads)"},
    {"gdn_key_head_dim", &ModelDims::gdn_key_head_dim, 0,
     "Gated DeltaNet query/key head size (0 = gdn_head_dim)"},
    {"attn_output_gate", &ModelDims::attn_output_gate, 0, "1: sigmoid output gate on attention", 1},
    {"qk_norm", &ModelDims::qk_norm, 0, "1: RMSNorm on attention queries and keys", 1},
    {"rotary_percent", &ModelDims::rotary_percent, 1, "share of the head size RoPE rotates (%)", 100},
    {"tied_embeddings", &ModelDims::tied_embeddings, 0, "1: output layer tied to the embedding", 1},
    {"shared_expert_gate", &ModelDims::shared_expert_gate, 0, "1: sigmoid gate on the shared expert", 1},
    {"gated_ffn", &ModelDims::gated_ffn, 0, "1: SwiGLU FFNs (3 matrices); 0: non-gated (2)", 1},
    {"mla_rope_head_dim", &ModelDims::mla_rope_head_dim, 0, "MLA decoupled RoPE head size"},
    {"mla_v_head_dim", &ModelDims::mla_v_head_dim, 0, "MLA value head size (0 = head_dim)"},
    {"mla_qk_head_dim", &ModelDims::mla_qk_head_dim, 0, "MLA no-RoPE query/key head size (0 = head_dim)"},
    {"moe_latent_size", &ModelDims::moe_latent_size, 0, "latent MoE width of the routed experts (0 = hidden)"},
    {"mtp_shared_weights", &ModelDims::mtp_shared_weights, 0, "1: MTP depths share one set of weights", 1},
    {"router_groups", &ModelDims::router_groups, 0, "group-limited routing: expert groups (0 = none)"},
    {"router_group_topk", &ModelDims::router_group_topk, 0, "group-limited routing: groups a token may use"},
}};

[[noreturn]] void bad_model(const std::string& message) {
  throw ScheduleError(ErrorCode::BadModel, message);
}

[[noreturn]] void bad_config(const std::string& message) {
  throw ScheduleError(ErrorCode::BadConfig, message);
}

}  // namespace

ModelDims tiny_model() {
  ModelDims d;
  d.hidden = 64;
  d.ffn_hidden = 128;
  d.num_heads = 4;
  d.num_kv_heads = 2;
  d.head_dim = 16;
  d.mamba_state = 16;
  d.mamba_head_dim = 16;
  d.mamba_num_heads = 8;
  d.mamba_groups = 2;
  d.conv_kernel = 4;
  d.gdn_num_heads = 4;
  d.gdn_head_dim = 16;
  d.num_experts = 8;
  d.top_k = 2;
  d.moe_ffn_hidden = 32;
  d.shared_expert_ffn = 0;
  d.vocab = 128;
  d.seq_len = 32;
  d.micro_batch = 2;
  d.bytes_per_element = 2;
  d.q_lora_rank = 32;
  d.kv_lora_rank = 16;
  d.window = 8;
  return d;
}

std::span<const ModelField> model_fields() { return kFields; }

void validate(const ModelDims& d) {
  for (const ModelField& f : kFields)
    if (d.*f.member < f.min || d.*f.member > f.max)
      bad_model("model field '" + std::string(f.name) + "' = " + std::to_string(d.*f.member) +
                (d.*f.member < f.min && f.max == ModelField{}.max
                     ? " must be >= " + std::to_string(f.min)
                     : " must be in [" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]"));
  if (d.num_heads % d.num_kv_heads != 0)
    bad_model("num_heads = " + std::to_string(d.num_heads) + " must be a multiple of num_kv_heads = " +
              std::to_string(d.num_kv_heads));
  if (d.mamba_num_heads % d.mamba_groups != 0)
    bad_model("mamba_num_heads = " + std::to_string(d.mamba_num_heads) +
              " must be a multiple of mamba_groups = " + std::to_string(d.mamba_groups));
  if (d.gdn_num_heads % d.gdn_qk_heads() != 0)
    bad_model("gdn_num_heads = " + std::to_string(d.gdn_num_heads) +
              " (value heads) must be a multiple of gdn_key_heads = " + std::to_string(d.gdn_qk_heads()));
  if (d.top_k > d.num_experts)
    bad_model("top_k = " + std::to_string(d.top_k) + " exceeds num_experts = " +
              std::to_string(d.num_experts));
  if (d.router_groups > 0 || d.router_group_topk > 0) {
    if (d.router_groups == 0 || d.num_experts % d.router_groups != 0)
      bad_model("router_groups = " + std::to_string(d.router_groups) + " must divide num_experts = " +
                std::to_string(d.num_experts));
    if (d.router_group_topk < 1 || d.router_group_topk > d.router_groups)
      bad_model("router_group_topk = " + std::to_string(d.router_group_topk) + " must be in [1, router_groups = " +
                std::to_string(d.router_groups) + "]");
    if (double(d.router_group_topk) * (d.num_experts / d.router_groups) < d.top_k)
      bad_model("router_group_topk x experts per group = " +
                std::to_string(d.router_group_topk * (d.num_experts / d.router_groups)) + " must be >= top_k = " +
                std::to_string(d.top_k));
  }
  if (d.bytes_per_element != 1 && d.bytes_per_element != 2 && d.bytes_per_element != 4)
    bad_model("bytes_per_element = " + std::to_string(d.bytes_per_element) + " must be 1, 2 or 4");
}

void validate(const ParallelConfig& c) {
  auto at_least_one = [](std::string_view name, int value) {
    if (value < 1) bad_config(std::string(name) + " = " + std::to_string(value) + " must be >= 1");
  };
  at_least_one("ep", c.ep);
  at_least_one("pp", c.pp);
  at_least_one("dp", c.dp);
  at_least_one("microbatches", c.microbatches);
  at_least_one("tp", c.tp);
  at_least_one("cp", c.cp);
  at_least_one("etp", c.etp);
  if (c.vpp < 0) bad_config("vpp = " + std::to_string(c.vpp) + " must be >= 0 (0 = not set)");
  if (static_cast<long long>(c.tp) * c.cp * c.dp * c.pp > (1 << 24))
    bad_config("tp x cp x dp x pp = " + std::to_string(static_cast<long long>(c.tp) * c.cp * c.dp * c.pp) +
               " ranks exceeds the limit of 16777216");
  const long long stage = static_cast<long long>(c.tp) * c.cp * c.dp;
  const long long expert = static_cast<long long>(c.ep) * c.etp;
  if (stage % expert != 0) {
    bad_config("ep x etp = " + std::to_string(expert) + " must divide tp x cp x dp = " + std::to_string(stage) +
               " (MoE layers fold ep x etp x edp over the tp x cp x dp ranks of a pipeline stage)");
  }
  if (c.vpp > 1 && c.pp == 1)
    bad_config("vpp = " + std::to_string(c.vpp) + " needs pp > 1 (virtual stages interleave a pipeline)");
  // Megatron's interleaved schedule walks microbatches in groups of pp.
  if (c.pp > 1 && c.vpp > 0 && c.microbatches % c.pp != 0)
    bad_config("microbatches = " + std::to_string(c.microbatches) +
               " must be a multiple of pp = " + std::to_string(c.pp) +
               " for the interleaved pipeline schedule (vpp = " + std::to_string(c.vpp) + ")");
  const OptimizerConfig& o = c.optimizer;
  if (o.sync == GradSync::EndOfStep && (o.distributed || o.overlap_grad_reduce || o.overlap_param_gather))
    bad_config("the distributed optimizer and gradient/parameter overlap need Megatron's gradient sync "
               "(OptimizerConfig::sync = Megatron)");
  if (o.overlap_param_gather && !(o.distributed && o.overlap_grad_reduce))
    bad_config("overlapping the parameter all-gather needs the distributed optimizer and "
               "--overlap-grad-reduce (Megatron's rule)");
  if (o.grad_reduce_bf16 && o.sync != GradSync::Megatron)
    bad_config("gradients reduced in bf16 (--grad-reduce-in-bf16) need Megatron's gradient sync");
  if (o.fsdp && o.sync != GradSync::Megatron)
    bad_config("Megatron-FSDP needs Megatron's gradient sync (OptimizerConfig::sync = Megatron)");
  if (!std::isfinite(o.bucket_elements) || o.bucket_elements < 0)
    bad_config("bucket size = " + std::to_string(o.bucket_elements) + " elements must be finite and >= 0");
  if (c.split.first_stage_layers < -1 || c.split.last_stage_layers < -1)
    bad_config("first/last pipeline stage layer counts must be >= 0 (first " +
               std::to_string(c.split.first_stage_layers) + ", last " + std::to_string(c.split.last_stage_layers) + ")");
  if (c.split.uneven() && c.pp == 1) bad_config("first/last pipeline stage layer counts need pp > 1");
  if (c.split.account_embedding || c.split.account_loss)
    if (c.vpp == 0 && c.pp == 1)
      bad_config("counting the embedding or the loss as a pipeline layer needs pp > 1");
}

RankCoords rank_coords(const ParallelConfig& c, int r) {
  RankCoords k;
  k.tp = r % c.tp;
  k.cp = (r / c.tp) % c.cp;
  k.dp = (r / (c.tp * c.cp)) % c.dp;
  k.pp = r / c.stage_ranks();
  k.etp = r % c.etp;
  k.ep = (r / c.etp) % c.ep;
  k.edp = (r / (c.etp * c.ep)) % c.edp();
  return k;
}

std::string_view to_string(Group g) {
  switch (g) {
    case Group::Tp: return "tp";
    case Group::Cp: return "cp";
    case Group::Dp: return "dp";
    case Group::Pp: return "pp";
    case Group::Ep: return "ep";
    case Group::Etp: return "etp";
    case Group::Edp: return "edp";
  }
  return "?";
}

std::optional<Group> group_from_string(std::string_view s) {
  for (Group g : {Group::Tp, Group::Cp, Group::Dp, Group::Pp, Group::Ep, Group::Etp, Group::Edp})
    if (to_string(g) == s) return g;
  return std::nullopt;
}

std::vector<int> group_members(const ParallelConfig& c, int rank, Group g) {
  // A group holds the ranks that share every coordinate but the group's own axes.
  const RankCoords me = rank_coords(c, rank);
  std::vector<int> out;
  const int stage = c.stage_ranks();
  auto dense = [&](int tp, int cp, int dp, int pp) { return tp + c.tp * (cp + c.cp * (dp + c.dp * pp)); };
  auto expert = [&](int etp, int ep, int edp) { return me.pp * stage + etp + c.etp * (ep + c.ep * edp); };
  switch (g) {
    case Group::Tp: for (int i = 0; i < c.tp; ++i) out.push_back(dense(i, me.cp, me.dp, me.pp)); break;
    case Group::Cp: for (int i = 0; i < c.cp; ++i) out.push_back(dense(me.tp, i, me.dp, me.pp)); break;
    case Group::Dp:
      for (int d = 0; d < c.dp; ++d)
        for (int i = 0; i < c.cp; ++i) out.push_back(dense(me.tp, i, d, me.pp));
      break;
    case Group::Pp: for (int p = 0; p < c.pp; ++p) out.push_back(rank + (p - me.pp) * stage); break;
    case Group::Ep: for (int i = 0; i < c.ep; ++i) out.push_back(expert(me.etp, i, me.edp)); break;
    case Group::Etp: for (int i = 0; i < c.etp; ++i) out.push_back(expert(i, me.ep, me.edp)); break;
    case Group::Edp: for (int i = 0; i < c.edp(); ++i) out.push_back(expert(me.etp, me.ep, i)); break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::span<const RecomputeName> recompute_names() {
  static constexpr std::array<RecomputeName, 7> kNames{{
      {"core_attn", kRecomputeCoreAttn},
      {"layernorm", kRecomputeLayernorm},
      {"moe_act", kRecomputeMoeAct},
      {"mlp", kRecomputeMlp},
      {"moe", kRecomputeMoe},
      {"shared_experts", kRecomputeSharedExperts},
      {"mla_up_proj", kRecomputeMlaUpProj},
  }};
  return kNames;
}

namespace {

// The module bits of a comma-separated list of `names`' entries. `standalone` are the words that
// only stand alone (none, full: the caller handles them before); `what` names the list in errors;
// `refuse(name)` may refuse a known-but-unsupported word with its own reason.
template <class Names, class Refuse>
unsigned parse_module_list(std::string_view text, const Names& names,
                           std::initializer_list<std::string_view> standalone, const std::string& what,
                           Refuse&& refuse) {
  unsigned modules = 0;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t comma = std::min(text.find(',', begin), text.size());
    const std::string_view name = text.substr(begin, comma - begin);
    bool found = false;
    for (const auto& n : names)
      if (n.name == name) modules |= static_cast<unsigned>(n.module), found = true;
    if (!found && std::find(standalone.begin(), standalone.end(), name) != standalone.end())
      bad_config(what + " '" + std::string(name) + "' stands alone, not in a list of modules ('" +
                 std::string(text.substr(0, 80)) + "')");
    if (!found) refuse(name);
    if (!found) {
      std::string known;
      for (const std::string_view w : standalone) known += std::string(w) + ", ";
      for (const auto& n : names) known += std::string(n.name) + (&n == &names.back() ? "" : ", ");
      bad_config("unknown " + what + " module '" + std::string(name.substr(0, 40)) + "' (known: " + known + ")");
    }
    begin = comma + 1;
  }
  return modules;
}

}  // namespace

Recompute parse_recompute(std::string_view text) {
  Recompute r;
  if (text.empty()) bad_config("recompute is empty: give none, full or a comma-separated list of modules");
  if (text == "none") return r;
  if (text == "full") {
    r.full = true;
    return r;
  }
  r.modules = parse_module_list(text, recompute_names(), {"full", "none"}, "recompute", [](std::string_view) {});
  return r;
}

std::string to_string(const Recompute& r) {
  if (r.full)
    return r.block_layers >= 0    ? "full (block " + std::to_string(r.block_layers) + ")"
           : r.uniform_layers > 1 ? "full (uniform " + std::to_string(r.uniform_layers) + ")"
                                  : "full";
  std::string out;
  for (const RecomputeName& n : recompute_names())
    if (r.has(n.module)) out += (out.empty() ? "" : ",") + std::string(n.name);
  return out.empty() ? "none" : out;
}

std::span<const OffloadName> offload_names() {
  static constexpr std::array<OffloadName, 7> kNames{{
      {"attn_norm", kOffloadAttnNorm},
      {"qkv_linear", kOffloadQkvLinear},
      {"core_attn", kOffloadCoreAttn},
      {"attn_proj", kOffloadAttnProj},
      {"mlp_norm", kOffloadMlpNorm},
      {"expert_fc1", kOffloadExpertFc1},
      {"moe_act", kOffloadMoeAct},
  }};
  return kNames;
}

Offload parse_offload(std::string_view text) {
  Offload o;
  if (text.empty()) bad_config("offload modules are empty: give none or a comma-separated list of modules");
  if (text == "none") return o;
  o.modules = parse_module_list(text, offload_names(), {"none"}, "offload", [](std::string_view name) {
    if (name == "fused_group_mlp" || name == "gdp_qkv")
      bad_config("offload module '" + std::string(name) +
                 "' is not modelled (Transformer Engine's fused grouped MLP, GatedDeltaProduct's QKV)");
  });
  if (o.has(kOffloadAttnProj) && !o.has(kOffloadCoreAttn))
    bad_config("offload: attn_proj needs core_attn (its input is the core attention's output, which the core's "
               "backward keeps on the GPU otherwise; Megatron's rule)");
  return o;
}

std::string to_string(const Offload& o) {
  std::string out;
  for (const OffloadName& n : offload_names())
    if (o.has(n.module)) out += (out.empty() ? "" : ",") + std::string(n.name);
  return out.empty() ? "none" : out;
}

namespace {
constexpr std::array<std::pair<Dispatcher, std::string_view>, 4> kDispatchers{
    {{Dispatcher::AllGather, "allgather"}, {Dispatcher::AllToAll, "alltoall"}, {Dispatcher::DeepEP, "deepep"},
     {Dispatcher::HybridEP, "hybridep"}}};
constexpr std::array<std::pair<Routing, std::string_view>, 3> kRoutings{
    {{Routing::Mean, "mean"}, {Routing::AuxLoss, "aux-loss"}, {Routing::ForceBalance, "force-balance"}}};
constexpr std::array<std::pair<Precision, std::string_view>, 3> kPrecisions{
    {{Precision::Bf16, "bf16"}, {Precision::Fp8, "fp8"}, {Precision::Mxfp8, "mxfp8"}}};
}  // namespace

std::string_view to_string(Dispatcher d) { return detail::name_of(kDispatchers, d); }
std::optional<Dispatcher> dispatcher_from_string(std::string_view s) { return detail::lookup(kDispatchers, s); }
std::string_view to_string(Routing r) { return detail::name_of(kRoutings, r); }
std::optional<Routing> routing_from_string(std::string_view s) { return detail::lookup(kRoutings, s); }
std::string_view to_string(Precision p) { return detail::name_of(kPrecisions, p); }
std::optional<Precision> precision_from_string(std::string_view s) { return detail::lookup(kPrecisions, s); }

int dispatcher_sms(Dispatcher d) {
  switch (d) {
    case Dispatcher::DeepEP: return 20;
    case Dispatcher::HybridEP: return 8;
    default: return 0;
  }
}

void validate(const ScheduleOptions& o) {
  if (!std::isfinite(o.routing_skew) || o.routing_skew < 0)
    bad_config("routing_skew = " + std::to_string(o.routing_skew) + " must be finite and >= 0");
  if (o.expert_load != 0 && !(std::isfinite(o.expert_load) && o.expert_load >= 1))
    bad_config("expert_load = " + std::to_string(o.expert_load) +
               " must be >= 1 (the busiest EP rank's load over the mean; 0 = the routing model's)");
  if (o.expert_load != 0 && o.routing_skew != 0)
    bad_config("expert_load and routing_skew both set the expert load across EP ranks; give one");
  if (o.expert_node_load != 0 && !(std::isfinite(o.expert_node_load) && o.expert_node_load >= 1))
    bad_config("expert_node_load = " + std::to_string(o.expert_node_load) +
               " must be >= 1 (the busiest node's load over the mean; 0 = as expert_load or the routing model's)");
  if (o.expert_node_load != 0 && o.routing_skew != 0)
    bad_config("expert_node_load and routing_skew both set the expert load across EP ranks; give one");
  if (o.expert_node_load != 0 && o.expert_load == 0)
    bad_config(
        "expert_node_load needs expert_load: a node's load is the mean of its ranks', so give the busiest "
        "rank's too (hybrid-twin expert-load measures both)");
  if (o.expert_node_load != 0 && o.expert_load != 0 && o.expert_node_load > o.expert_load)
    bad_config("expert_node_load = " + std::to_string(o.expert_node_load) + " is above expert_load = " +
               std::to_string(o.expert_load) + ": a node's load is the mean of its ranks', so never above the busiest");
}

std::string model_dims_to_json(const ModelDims& d) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const ModelField& f : kFields) j[std::string(f.name)] = d.*f.member;
  return j.dump(2) + "\n";
}

namespace {

ModelDims dims_from(const nlohmann::json& j) {
  if (!j.is_object()) bad_model("model file must hold one JSON object of integer fields");
  ModelDims d;
  for (const auto& [key, value] : j.items()) {
    const ModelField* field = nullptr;
    for (const ModelField& f : kFields)
      if (f.name == key) field = &f;
    if (field == nullptr) {
      std::string known;
      for (const ModelField& f : kFields) known += (known.empty() ? "" : ", ") + std::string(f.name);
      bad_model("unknown model field '" + key + "' (known: " + known + ")");
    }
    if (!value.is_number_integer())
      bad_model("model field '" + key + "' must be an integer, got " + value.dump());
    const auto v = value.get<long long>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      bad_model("model field '" + key + "' = " + value.dump() + " is out of range");
    d.*field->member = static_cast<int>(v);
  }
  validate(d);
  return d;
}

}  // namespace

ModelDims model_dims_from_json(std::string_view text) {
  return dims_from(detail::parse_json(text, "model dimensions", ErrorCode::BadModel));
}

ModelDims load_model_dims(const std::filesystem::path& path) {
  const nlohmann::json j = detail::read_json(path, "model file", ErrorCode::BadModel);
  try {
    return dims_from(j);
  } catch (const ScheduleError& e) {
    if (e.code() == ErrorCode::Io) throw;
    throw ScheduleError(e.code(), std::string(e.what()).substr(std::string("model: ").size()) +
                                      " (in '" + path.string() + "')");
  }
}

void save_model_dims(const std::filesystem::path& path, const ModelDims& dims) {
  validate(dims);
  detail::write_text(path, "model file", model_dims_to_json(dims));
}

}  // namespace ht::schedule
