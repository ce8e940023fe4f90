// Hugging Face config.json -> model card (see hf_config.hpp; the mapping table is in
// patterns/models/README.md). Field defaults are those of the transformers configuration class of
// each family where the file may omit them (decoder_sparse_step 1, mlp_only_layers [],
// full_attention_interval 4, partial_rotary_factor 1, tie_word_embeddings false, head_dim =
// hidden / heads, num_key_value_heads = heads).
#include "ht/schedule/hf_config.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "files.hpp"
#include "ht/patterns/error.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadModel, message); }

}  // namespace

std::string python_constants_as_strings(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) out += text[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (std::string_view word : {"-Infinity", "Infinity", "NaN"})
      if (text.substr(i, word.size()) == word) {
        const std::size_t end = i + word.size();
        const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
        if ((i > 0 && is_word(text[i - 1])) || (end < text.size() && is_word(text[end]))) break;
        out += '"';
        out += word;
        out += '"';
        i = end - 1;
        replaced = true;
        break;
      }
    if (!replaced) out += ch;
  }
  return out;
}

namespace {

class Reader {
 public:
  Reader(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* k) const { return j_.contains(k) && !j_[k].is_null(); }
  long long integer(const char* k) {
    if (!has(k)) bad(where_ + ": \"" + k + "\" is missing (the " + family() + " mapping needs it)");
    return integer_or(k, 0);
  }
  long long integer_or(const char* k, long long fallback) {
    if (!has(k)) return fallback;
    used_.insert(k);
    const auto& v = j_[k];
    if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > (1LL << 31) - 1)
      bad(where_ + ": \"" + k + "\" = " + v.dump().substr(0, 40) + " must be an integer in [0, 2^31)");
    return v.get<long long>();
  }
  double number_or(const char* k, double fallback) {
    if (!has(k)) return fallback;
    used_.insert(k);
    const auto& v = j_[k];
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad(where_ + ": \"" + k + "\" must be a number");
    return v.get<double>();
  }
  bool boolean_or(const char* k, bool fallback) {
    if (!has(k)) return fallback;
    used_.insert(k);
    if (!j_[k].is_boolean()) bad(where_ + ": \"" + k + "\" must be true or false");
    return j_[k].get<bool>();
  }
  std::string text(const char* k) {
    if (!has(k) || !j_[k].is_string()) bad(where_ + ": \"" + k + "\" must be a string");
    used_.insert(k);
    return j_[k].get<std::string>();
  }
  std::vector<long long> integers_or_empty(const char* k) {
    std::vector<long long> out;
    if (!has(k)) return out;
    used_.insert(k);
    if (!j_[k].is_array()) bad(where_ + ": \"" + k + "\" must be a list of layer numbers");
    for (const auto& v : j_[k]) {
      if (!v.is_number_integer()) bad(where_ + ": \"" + k + "\" must be a list of layer numbers");
      out.push_back(v.get<long long>());
    }
    return out;
  }
  std::vector<std::string> strings(const char* k) {
    std::vector<std::string> out;
    used_.insert(k);
    if (!j_[k].is_array()) bad(where_ + ": \"" + k + "\" must be a list of strings");
    for (const auto& v : j_[k]) {
      if (!v.is_string()) bad(where_ + ": \"" + k + "\" must be a list of strings");
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  // A field's value that breaks the family's rule: names the file, the field, the value and the rule.
  [[noreturn]] void refuse(const char* k, long long v, const std::string& rule) const {
    bad(where_ + ": \"" + k + "\" = " + std::to_string(v) + " " + rule);
  }
  std::string family() const { return j_.value("model_type", std::string("?")); }
  std::vector<std::string> used() const { return {used_.begin(), used_.end()}; }
  std::vector<std::string> not_used() const {
    std::vector<std::string> out;
    for (const auto& item : j_.items())
      if (!used_.count(item.key())) out.push_back(item.key());
    return out;
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
  std::set<std::string> used_{"model_type"};
};

int checked_int(long long v) { return static_cast<int>(v); }

// Fields a family needs, each straight into one model field.
using Fields = std::initializer_list<std::pair<const char*, int ModelDims::*>>;
void required(Reader& r, ModelDims& d, Fields fields) {
  for (const auto& [key, member] : fields) d.*member = checked_int(r.integer(key));
}

// The fields every family shares: attention, dense FFN, vocabulary, embeddings.
void common(Reader& r, ModelDims& d) {
  d.hidden = checked_int(r.integer("hidden_size"));
  d.num_heads = checked_int(r.integer("num_attention_heads"));
  d.num_kv_heads = checked_int(r.integer_or("num_key_value_heads", d.num_heads));
  if (d.num_heads <= 0) bad("num_attention_heads must be >= 1");
  d.head_dim = checked_int(r.integer_or("head_dim", d.hidden / d.num_heads));
  d.vocab = checked_int(r.integer("vocab_size"));
  d.tied_embeddings = r.boolean_or("tie_word_embeddings", false) ? 1 : 0;
  d.gated_ffn = 1;  // SiLU-gated MLPs (Nemotron-H overrides: squared ReLU, no gate)
  d.rotary_percent = static_cast<int>(std::lround(100 * r.number_or("partial_rotary_factor", 1.0)));
  d.attn_output_gate = 0;
  d.qk_norm = 0;
}

// Qwen-style MoE placement: layer i is MoE unless listed in mlp_only_layers, every
// decoder_sparse_step-th layer. A step of 0 (transformers divides by it) or a listed layer the
// model does not have would silently change which layers are MoE: refused.
std::vector<bool> qwen_moe_layers(Reader& r, int layers, bool moe) {
  const long long step = r.integer_or("decoder_sparse_step", 1);
  if (step < 1) r.refuse("decoder_sparse_step", step, "must be >= 1 (every decoder_sparse_step-th layer is MoE)");
  const std::vector<long long> dense = r.integers_or_empty("mlp_only_layers");
  for (const long long i : dense)
    if (i < 0 || i >= layers)
      r.refuse("mlp_only_layers", i,
               "is not a layer: its entries must be in [0, num_hidden_layers - 1 = " + std::to_string(layers - 1) + "]");
  std::vector<bool> out(static_cast<std::size_t>(layers), false);
  for (int i = 0; i < layers; ++i)
    out[static_cast<std::size_t>(i)] = moe && (i + 1) % step == 0 &&
                                       std::find(dense.begin(), dense.end(), i) == dense.end();
  return out;
}

std::string grouped(const std::vector<char>& mixers, const std::vector<bool>& moe) {
  std::string p;
  for (std::size_t i = 0; i < mixers.size(); ++i) p += std::string("[") + mixers[i] + (moe[i] ? 'E' : '-') + "]";
  return p;
}

int layer_count(Reader& r) {
  const long long n = r.integer("num_hidden_layers");
  if (n < 1 || n > 4096) bad("num_hidden_layers = " + std::to_string(n) + " must be in [1, 4096]");
  return static_cast<int>(n);
}

void llama(Reader& r, ModelCard& c) {
  common(r, c.dims);
  c.dims.ffn_hidden = checked_int(r.integer("intermediate_size"));
  c.dims.qk_norm = r.family() == "qwen3" ? 1 : 0;
  const int n = layer_count(r);
  c.pattern = grouped(std::vector<char>(static_cast<std::size_t>(n), '*'), std::vector<bool>(static_cast<std::size_t>(n), false));
}

void qwen3_moe(Reader& r, ModelCard& c) {
  common(r, c.dims);
  c.dims.qk_norm = 1;
  required(r, c.dims, {{"num_experts", &ModelDims::num_experts}, {"num_experts_per_tok", &ModelDims::top_k},
                       {"moe_intermediate_size", &ModelDims::moe_ffn_hidden}});
  const int n = layer_count(r);
  const std::vector<bool> moe = qwen_moe_layers(r, n, c.dims.num_experts > 0);
  if (std::find(moe.begin(), moe.end(), false) != moe.end()) c.dims.ffn_hidden = checked_int(r.integer("intermediate_size"));
  c.pattern = grouped(std::vector<char>(static_cast<std::size_t>(n), '*'), moe);
}

void mixtral(Reader& r, ModelCard& c) {
  common(r, c.dims);
  required(r, c.dims, {{"num_local_experts", &ModelDims::num_experts}, {"num_experts_per_tok", &ModelDims::top_k},
                       {"intermediate_size", &ModelDims::moe_ffn_hidden}});
  const int n = layer_count(r);
  c.pattern = grouped(std::vector<char>(static_cast<std::size_t>(n), '*'), std::vector<bool>(static_cast<std::size_t>(n), true));
}

void deepseek_v3(Reader& r, ModelCard& c) {
  common(r, c.dims);
  auto& d = c.dims;
  d.num_kv_heads = d.num_heads;  // MLA: every head has its own keys and values
  d.qk_norm = 1;                 // MLA's q/kv low-rank norms
  required(r, d, {{"q_lora_rank", &ModelDims::q_lora_rank}, {"kv_lora_rank", &ModelDims::kv_lora_rank},
                  {"qk_nope_head_dim", &ModelDims::head_dim}, {"qk_rope_head_dim", &ModelDims::mla_rope_head_dim},
                  {"v_head_dim", &ModelDims::mla_v_head_dim}, {"intermediate_size", &ModelDims::ffn_hidden},
                  {"n_routed_experts", &ModelDims::num_experts}, {"num_experts_per_tok", &ModelDims::top_k},
                  {"moe_intermediate_size", &ModelDims::moe_ffn_hidden}});
  d.shared_expert_ffn = checked_int(r.integer_or("n_shared_experts", 0) * d.moe_ffn_hidden);
  d.shared_expert_gate = 0;
  d.router_groups = checked_int(r.integer_or("n_group", 0));
  d.router_group_topk = checked_int(r.integer_or("topk_group", 0));
  if (d.router_groups <= 1) d.router_groups = 0, d.router_group_topk = 0;
  const int n = layer_count(r);
  const long long dense = r.integer_or("first_k_dense_replace", 0);
  const long long freq = r.integer_or("moe_layer_freq", 1);
  if (freq < 1) r.refuse("moe_layer_freq", freq, "must be >= 1 (every moe_layer_freq-th layer is MoE)");
  std::vector<bool> moe(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) moe[static_cast<std::size_t>(i)] = i >= dense && i % freq == 0;
  c.pattern = grouped(std::vector<char>(static_cast<std::size_t>(n), '+'), moe);
  for (long long k = 0; k < r.integer_or("num_nextn_predict_layers", 0); ++k) c.pattern += "/+E";
}

void qwen3_next(Reader& r, ModelCard& c) {
  common(r, c.dims);
  auto& d = c.dims;
  d.qk_norm = 1;
  d.attn_output_gate = 1;  // Qwen3-Next's gated attention (always on in the family)
  required(r, d, {{"linear_conv_kernel_dim", &ModelDims::conv_kernel},
                  {"linear_num_value_heads", &ModelDims::gdn_num_heads},
                  {"linear_value_head_dim", &ModelDims::gdn_head_dim},
                  {"linear_num_key_heads", &ModelDims::gdn_key_heads},
                  {"linear_key_head_dim", &ModelDims::gdn_key_head_dim}, {"num_experts", &ModelDims::num_experts},
                  {"num_experts_per_tok", &ModelDims::top_k}, {"moe_intermediate_size", &ModelDims::moe_ffn_hidden}});
  d.shared_expert_ffn = checked_int(r.integer_or("shared_expert_intermediate_size", 0));
  d.shared_expert_gate = d.shared_expert_ffn > 0 ? 1 : 0;
  const int n = layer_count(r);
  std::vector<char> mixers(static_cast<std::size_t>(n));
  if (r.has("layer_types")) {
    const auto types = r.strings("layer_types");
    if (static_cast<int>(types.size()) != n)
      bad("layer_types lists " + std::to_string(types.size()) + " layers, num_hidden_layers says " + std::to_string(n));
    for (int i = 0; i < n; ++i) {
      const std::string& t = types[static_cast<std::size_t>(i)];
      if (t != "linear_attention" && t != "full_attention")
        bad("layer_types[" + std::to_string(i) + "] = '" + t + "' (expected linear_attention or full_attention)");
      mixers[static_cast<std::size_t>(i)] = t == "full_attention" ? '*' : 'G';
    }
  } else {
    const long long interval = r.integer_or("full_attention_interval", 4);
    if (interval < 1) bad("full_attention_interval must be >= 1");
    for (int i = 0; i < n; ++i) mixers[static_cast<std::size_t>(i)] = (i + 1) % interval == 0 ? '*' : 'G';
  }
  const std::vector<bool> moe = qwen_moe_layers(r, n, d.num_experts > 0);
  if (std::find(moe.begin(), moe.end(), false) != moe.end()) d.ffn_hidden = checked_int(r.integer("intermediate_size"));
  c.pattern = grouped(mixers, moe);
  for (long long k = 0; k < r.integer_or("mtp_num_hidden_layers", r.integer_or("num_nextn_predict_layers", 0)); ++k)
    c.pattern += "/*E";
}

void nemotron_h(Reader& r, ModelCard& c) {
  common(r, c.dims);
  auto& d = c.dims;
  d.gated_ffn = 0;  // squared-ReLU MLP
  d.head_dim = checked_int(r.integer_or("head_dim", r.integer_or("attention_head_dim", d.hidden / d.num_heads)));
  required(r, d, {{"mamba_num_heads", &ModelDims::mamba_num_heads}, {"mamba_head_dim", &ModelDims::mamba_head_dim},
                  {"ssm_state_size", &ModelDims::mamba_state}, {"n_groups", &ModelDims::mamba_groups}});
  d.conv_kernel = checked_int(r.integer_or("conv_kernel", 4));
  if (r.has("n_routed_experts")) {
    required(r, d, {{"n_routed_experts", &ModelDims::num_experts}, {"num_experts_per_tok", &ModelDims::top_k},
                    {"moe_intermediate_size", &ModelDims::moe_ffn_hidden}});
    d.shared_expert_ffn = checked_int(r.integer_or("moe_shared_expert_intermediate_size", 0));
    // LatentMoE (Nemotron 3 Super): routed experts work at this width between two projections.
    d.moe_latent_size = checked_int(r.integer_or("moe_latent_size", 0));
  }
  c.pattern = r.text("hybrid_override_pattern");
  const long long n = r.integer_or("num_hidden_layers", static_cast<long long>(c.pattern.size()));
  if (n != static_cast<long long>(c.pattern.size()))
    bad("hybrid_override_pattern has " + std::to_string(c.pattern.size()) + " layers, num_hidden_layers says " +
        std::to_string(n));
  // The dense MLP size prices only '-' layers (Nemotron 3 Nano's config repeats its expert size there).
  if (c.pattern.find('-') != std::string::npos) d.ffn_hidden = checked_int(r.integer("intermediate_size"));
  // MTP depths, each the layers of mtp_hybrid_override_pattern (Nemotron 3 Super: one '*E').
  const long long depths = r.integer_or("num_nextn_predict_layers", 0);
  if (depths < 0 || depths > 16) r.refuse("num_nextn_predict_layers", depths, "must be 0 to 16");
  if (depths > 0) {
    const std::string mtp = r.text("mtp_hybrid_override_pattern");
    for (long long k = 0; k < depths; ++k) c.pattern += "/" + mtp;
  }
}

// Jamba: every decoder layer a mixer (attention every attn_layer_period-th layer from
// attn_layer_offset, Mamba elsewhere) and an FFN (MoE every expert_layer_period-th layer from
// expert_layer_offset, dense elsewhere). Its Mamba-1 mixer is written on the Mamba-2 fields as the
// shipped card does: d_inner = mamba_expand x hidden as heads of 64, one B/C group, state
// mamba_d_state, conv mamba_d_conv (the SSM state is exact; Mamba-1's dt_rank projections are not
// represented, 0.2 % of Jamba v0.1's parameters).
void jamba(Reader& r, ModelCard& c) {
  common(r, c.dims);
  auto& d = c.dims;
  required(r, d, {{"num_experts", &ModelDims::num_experts}, {"num_experts_per_tok", &ModelDims::top_k},
                  {"intermediate_size", &ModelDims::moe_ffn_hidden}, {"mamba_d_state", &ModelDims::mamba_state}});
  d.conv_kernel = checked_int(r.integer_or("mamba_d_conv", 4));
  constexpr long long kHeadDim = 64;
  const long long inner = r.integer_or("mamba_expand", 2) * d.hidden;
  if (inner <= 0 || inner % kHeadDim != 0)
    bad("mamba_expand x hidden_size = " + std::to_string(inner) + " must be a positive multiple of " +
        std::to_string(kHeadDim) + " (written as Mamba-2 heads of 64)");
  d.mamba_head_dim = static_cast<int>(kHeadDim);
  d.mamba_num_heads = checked_int(inner / kHeadDim);
  d.mamba_groups = 1;
  const int n = layer_count(r);
  auto periodic = [&](const char* period_key, const char* offset_key, long long period0, long long offset0) {
    const long long period = r.integer_or(period_key, period0), offset = r.integer_or(offset_key, offset0);
    if (period < 1 || offset >= period)
      bad(std::string("\"") + offset_key + "\" = " + std::to_string(offset) + " must be below \"" + period_key +
          "\" = " + std::to_string(period) + " (>= 1)");
    std::vector<bool> out(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = i % period == offset;
    return out;
  };
  const std::vector<bool> attention = periodic("attn_layer_period", "attn_layer_offset", 8, 4);
  const std::vector<bool> moe = periodic("expert_layer_period", "expert_layer_offset", 2, 1);
  std::vector<char> mixers(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) mixers[static_cast<std::size_t>(i)] = attention[static_cast<std::size_t>(i)] ? '*' : 'M';
  if (std::find(moe.begin(), moe.end(), false) != moe.end()) d.ffn_hidden = d.moe_ffn_hidden;
  c.pattern = grouped(mixers, moe);
}

using Mapper = void (*)(Reader&, ModelCard&);
const std::map<std::string, Mapper>& mappers() {
  static const std::map<std::string, Mapper> table{
      {"llama", llama},        {"mistral", llama},         {"qwen2", llama},       {"qwen3", llama},
      {"qwen3_moe", qwen3_moe}, {"mixtral", mixtral},       {"deepseek_v3", deepseek_v3},
      {"qwen3_next", qwen3_next}, {"nemotron_h", nemotron_h}, {"jamba", jamba}};
  return table;
}

}  // namespace

bool is_hf_config(std::string_view text) {
  try {
    const auto j = detail::parse_json(python_constants_as_strings(text), "model file", ErrorCode::BadModel);
    return j.is_object() && j.contains("model_type") && j["model_type"].is_string() && !j.contains("dims");
  } catch (const ScheduleError&) {
    return false;
  }
}

std::vector<std::string> hf_families() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : mappers()) out.push_back(name);
  return out;
}

HfImport import_hf_config(std::string_view text, const std::string& where) {
  const nlohmann::json j =
      detail::parse_json(python_constants_as_strings(text), "Hugging Face config " + where, ErrorCode::BadModel);
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string())
    bad(where + ": not a Hugging Face config.json (no \"model_type\")");
  HfImport out;
  out.family = j["model_type"].get<std::string>();
  const auto it = mappers().find(out.family);
  if (it == mappers().end()) {
    std::string known;
    for (const auto& f : hf_families()) known += (known.empty() ? "" : ", ") + f;
    bad(where + ": model_type '" + out.family.substr(0, 40) + "' is not one the import maps (known: " + known + ")");
  }
  Reader r(j, where);
  ModelCard& c = out.card;
  // Every refusal names the file (a family's own rules are written without it), and the layer
  // pattern the config gives or implies is checked here, where the file is known.
  try {
    it->second(r, c);
  } catch (const ScheduleError& e) {
    std::string message = e.what();
    const std::string code = std::string(error_code_text(e.code())) + ": ";
    if (message.starts_with(code)) message.erase(0, code.size());
    if (message.starts_with(where + ": ")) throw;
    throw ScheduleError(e.code(), where + ": " + message);
  }
  try {
    (void)patterns::parse(c.pattern);
  } catch (const patterns::PatternError& e) {
    bad(where + ": the layer pattern '" + c.pattern.substr(0, 60) + (c.pattern.size() > 60 ? "..." : "") +
        "' is refused: " + e.what());
  }
  std::string name = where;
  if (const auto slash = name.find_last_of('/'); slash != std::string::npos) name = name.substr(slash + 1);
  c.description = "imported from the Hugging Face config " + name + " (model_type " + out.family + ")";
  c.source = where;
  try {
    validate(c.dims);
  } catch (const ScheduleError& e) {
    bad(where + ": the imported dimensions are refused: " + std::string(e.what()));
  }
  out.used = r.used();
  out.not_used = r.not_used();
  return out;
}

std::string model_card_to_json(const ModelCard& card) {
  nlohmann::json j;
  if (!card.name.empty()) j["name"] = card.name;
  if (!card.description.empty()) j["description"] = card.description;
  if (!card.source.empty()) j["source"] = card.source;
  j["pattern"] = card.pattern;
  const ModelDims defaults{};
  nlohmann::json dims = nlohmann::json::object();
  for (const ModelField& f : model_fields())
    if (card.dims.*f.member != defaults.*f.member || f.name == "hidden") dims[std::string(f.name)] = card.dims.*f.member;
  j["dims"] = dims;
  return j.dump(2) + "\n";
}

}  // namespace ht::schedule
