// Model dimensions, parallel layout and schedule options: presets, range checks and the model
// JSON file (see config.hpp).
#include "ht/schedule/config.hpp"

#include <array>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "ht/schedule/error.hpp"
#include "files.hpp"

namespace ht::schedule {
namespace {

constexpr std::array<ModelField, 23> kFields{{
    {"hidden", &ModelDims::hidden, 1, "hidden size"},
    {"ffn_hidden", &ModelDims::ffn_hidden, 1, "dense MLP intermediate size"},
    {"num_heads", &ModelDims::num_heads, 1, "attention query heads"},
    {"num_kv_heads", &ModelDims::num_kv_heads, 1, "attention key/value heads (GQA)"},
    {"head_dim", &ModelDims::head_dim, 1, "attention head size"},
    {"mamba_state", &ModelDims::mamba_state, 1, "Mamba SSM state size per head"},
    {"mamba_head_dim", &ModelDims::mamba_head_dim, 1, "Mamba head size"},
    {"mamba_num_heads", &ModelDims::mamba_num_heads, 1, "Mamba heads"},
    {"mamba_groups", &ModelDims::mamba_groups, 1, "Mamba B/C groups"},
    {"conv_kernel", &ModelDims::conv_kernel, 1, "causal conv width (Mamba, GDN)"},
    {"gdn_num_heads", &ModelDims::gdn_num_heads, 1, "Gated DeltaNet heads"},
    {"gdn_head_dim", &ModelDims::gdn_head_dim, 1, "Gated DeltaNet head size"},
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
    if (d.*f.member < f.min)
      bad_model("model field '" + std::string(f.name) + "' = " + std::to_string(d.*f.member) +
                " must be >= " + std::to_string(f.min));
  if (d.num_heads % d.num_kv_heads != 0)
    bad_model("num_heads = " + std::to_string(d.num_heads) + " must be a multiple of num_kv_heads = " +
              std::to_string(d.num_kv_heads));
  if (d.mamba_num_heads % d.mamba_groups != 0)
    bad_model("mamba_num_heads = " + std::to_string(d.mamba_num_heads) +
              " must be a multiple of mamba_groups = " + std::to_string(d.mamba_groups));
  if (d.top_k > d.num_experts)
    bad_model("top_k = " + std::to_string(d.top_k) + " exceeds num_experts = " +
              std::to_string(d.num_experts));
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
  if (c.vpp < 0) bad_config("vpp = " + std::to_string(c.vpp) + " must be >= 0 (0 = not set)");
  if (c.dp % c.ep != 0)
    bad_config("dp = " + std::to_string(c.dp) + " must be a multiple of ep = " +
               std::to_string(c.ep) + " (EP groups are subsets of the data-parallel ranks)");
  if (c.vpp > 1 && c.pp == 1)
    bad_config("vpp = " + std::to_string(c.vpp) + " needs pp > 1 (virtual stages interleave a pipeline)");
  // Megatron's interleaved schedule walks microbatches in groups of pp.
  if (c.pp > 1 && c.vpp > 0 && c.microbatches % c.pp != 0)
    bad_config("microbatches = " + std::to_string(c.microbatches) +
               " must be a multiple of pp = " + std::to_string(c.pp) +
               " for the interleaved pipeline schedule (vpp = " + std::to_string(c.vpp) + ")");
}

void validate(const ScheduleOptions& o) {
  if (!std::isfinite(o.routing_skew) || o.routing_skew < 0)
    bad_config("routing_skew = " + std::to_string(o.routing_skew) + " must be finite and >= 0");
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
