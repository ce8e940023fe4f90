// The schema of replayed cases (see case_schema.hpp). One table of fields for all properties: the
// generators use each name with one meaning everywhere (pattern, ep, microbatches, ...), so a
// field's rule does not depend on the property. Bounds: the generators' ranges (in the comments)
// widened about fourfold.
#include "ht/verify/case_schema.hpp"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>

namespace ht::verify {
namespace {

[[noreturn]] void bad(const std::string& message) { throw BadCase("input: " + message); }

std::string shown(const nlohmann::json& v) {
  std::string text = v.dump();
  return text.size() <= 40 ? text : text.substr(0, 37) + "...";
}

using Rule = std::function<void(const std::string& name, const nlohmann::json& v)>;

Rule integer(long long lo, long long hi) {
  return [lo, hi](const std::string& name, const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<long long>() < lo || v.get<long long>() > hi)
      bad("'" + name + "' = " + shown(v) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
}

Rule unsigned_integer() {
  return [](const std::string& name, const nlohmann::json& v) {
    if (!v.is_number_unsigned()) bad("'" + name + "' = " + shown(v) + " must be an integer >= 0");
  };
}

Rule number(double lo, double hi) {
  return [lo, hi](const std::string& name, const nlohmann::json& v) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo || v.get<double>() > hi)
      bad("'" + name + "' = " + shown(v) + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
}

Rule boolean() {
  return [](const std::string& name, const nlohmann::json& v) {
    if (!v.is_boolean()) bad("'" + name + "' = " + shown(v) + " must be true or false");
  };
}

Rule text(std::size_t max) {
  return [max](const std::string& name, const nlohmann::json& v) {
    if (!v.is_string() || v.get_ref<const std::string&>().size() > max)
      bad("'" + name + "' = " + shown(v) + " must be a string of at most " + std::to_string(max) + " characters");
  };
}

Rule integers(long long lo, long long hi, std::size_t max) {
  return [lo, hi, max](const std::string& name, const nlohmann::json& v) {
    if (!v.is_array() || v.size() > max) bad("'" + name + "' must be an array of at most " + std::to_string(max) + " integers");
    for (const auto& x : v) integer(lo, hi)(name + "[]", x);
  };
}

Rule fields(const std::map<std::string, Rule>& table);

// The generated pattern model of the pattern properties: segments of item strings.
Rule segments() {
  return [](const std::string& name, const nlohmann::json& v) {
    if (!v.is_array() || v.size() > 64) bad("'" + name + "' must be an array of at most 64 segments");
    for (const auto& seg : v) {
      if (!seg.is_array() || seg.size() > 64) bad("'" + name + "' must hold arrays of at most 64 items");
      for (const auto& item : seg) {
        text(16)(name + "[][]", item);
        const auto& s = item.get_ref<const std::string&>();
        if (s.empty() || (s.front() == '[' && (s.size() < 2 || s.back() != ']')))
          bad("'" + name + "' item " + shown(item) + " must be symbols or [symbols]");
      }
    }
  };
}

const std::map<std::string, Rule>& model_fields() {
  // engine_gen.hpp tiny_model_config: hidden 8/16, kv heads 4/8, window 1/2, shared 0/8, experts 2/4.
  static const std::map<std::string, Rule> table = {
      {"hidden", integer(1, 64)},       {"num_kv_heads", integer(1, 32)},          {"window", integer(1, 64)},
      {"num_experts", integer(1, 32)},  {"moe_topk", integer(1, 32)},              {"moe_shared_ffn_hidden", integer(0, 64)},
  };
  return table;
}

const std::map<std::string, Rule>& case_fields() {
  static const std::map<std::string, Rule> table = {
      // patterns (generated: a few dozen characters) and their generated model
      {"pattern", text(512)},
      {"world", text(64)},
      {"segments", segments()},
      {"mtp", text(16)},
      {"mtp_repeats", integer(0, 8)},
      // rule violations: the rule code and the caret position
      {"code", text(8)},
      {"position", integer(-1, 512)},
      // pipelines (pp 1-4, vpp 0-3, stage overrides 0-3)
      {"pp", integer(0, 16)},
      {"vpp", integer(0, 16)},
      {"pp_rank", integer(-1, 16)},
      {"vp_stage", integer(-1, 16)},
      {"first_stage_layers", integer(-1, 64)},
      {"last_stage_layers", integer(-1, 64)},
      // plans (ep 1-4, dp up to 8, microbatches 1-6) and the twin's platform
      {"ep", integer(1, 16)},
      {"dp", integer(1, 32)},
      {"microbatches", integer(1, 32)},
      {"overlap", boolean()},
      {"delay_wgrad", boolean()},
      {"early_attn_release", boolean()},
      {"shared_expert", boolean()},
      {"routing_skew", number(0, 16)},
      {"platform", text(256)},
      {"interference", number(1, 16)},
      // layouts (layout_gen.hpp): tp 1-4, cp 1-2, etp 1-2, Megatron's gradient sync, FSDP, recompute
      {"tp", integer(1, 8)},
      {"cp", integer(1, 8)},
      {"etp", integer(1, 8)},
      {"megatron_sync", boolean()},
      {"distributed_optimizer", boolean()},
      {"overlap_grad_reduce", boolean()},
      {"overlap_param_gather", boolean()},
      {"bucket_elements", number(0, 1e9)},
      {"fsdp", boolean()},
      {"recompute", text(256)},
      {"recompute_block_layers", integer(-1, 64)},
      {"recompute_uniform_layers", integer(1, 64)},
      // engine runs (batch 1-2, seq 4-8, seeds 0-999) on a tiny model
      {"batch", integer(1, 8)},
      {"seq", integer(1, 64)},
      {"data_seed", unsigned_integer()},
      {"weight_seed", unsigned_integer()},
      {"model", fields(model_fields())},
      // the router (tokens 1-12, experts 2-8, top-k 1-3, hidden 1-4, integer inputs -2..2)
      {"tokens", integer(1, 64)},
      {"experts", integer(1, 32)},
      {"topk", integer(1, 32)},
      {"hidden", integer(1, 16)},
      {"loss_scale", number(1e-6, 1e6)},
      {"x", integers(-1000, 1000, 64 * 16)},
      {"router", integers(-1000, 1000, 32 * 16)},
  };
  return table;
}

Rule fields(const std::map<std::string, Rule>& table) {
  return [&table](const std::string& name, const nlohmann::json& v) {
    if (!v.is_object()) bad("'" + name + "' must be an object");
    for (const auto& [key, value] : v.items()) {
      const auto it = table.find(key);
      if (it == table.end()) {
        std::string known;
        for (const auto& [k, _] : table) known += (known.empty() ? "" : ", ") + k;
        bad("unknown field '" + (name.empty() ? key : name + "." + key) + "' (known: " + known + ")");
      }
      it->second(name.empty() ? key : name + "." + key, value);
    }
  };
}

long long get(const nlohmann::json& c, const char* key) { return c.at(key).get<long long>(); }

}  // namespace

void validate_case(const Case& c) {
  fields(case_fields())("", c);
  // Fields that must agree with each other (each rule above holds on its own).
  if (c.contains("topk") && c.contains("experts") && get(c, "topk") > get(c, "experts"))
    bad("'topk' = " + std::to_string(get(c, "topk")) + " exceeds 'experts' = " + std::to_string(get(c, "experts")));
  if (c.contains("x") && (!c.contains("tokens") || !c.contains("hidden") ||
                          static_cast<long long>(c["x"].size()) != get(c, "tokens") * get(c, "hidden")))
    bad("'x' must hold tokens x hidden values");
  if (c.contains("router") && (!c.contains("experts") || !c.contains("hidden") ||
                               static_cast<long long>(c["router"].size()) != get(c, "experts") * get(c, "hidden")))
    bad("'router' must hold experts x hidden values");
  if (c.contains("ep") && c.contains("dp") && get(c, "dp") % get(c, "ep") != 0)
    bad("'dp' = " + std::to_string(get(c, "dp")) + " must be a multiple of 'ep' = " + std::to_string(get(c, "ep")));
  if (c.contains("model")) {
    const auto& m = c["model"];
    if (m.contains("moe_topk") && m.contains("num_experts") && get(m, "moe_topk") > get(m, "num_experts"))
      bad("'model.moe_topk' exceeds 'model.num_experts'");
    if (c.contains("ep") && m.contains("num_experts") && get(m, "num_experts") % get(c, "ep") != 0)
      bad("'model.num_experts' = " + std::to_string(get(m, "num_experts")) + " must be a multiple of 'ep' = " +
          std::to_string(get(c, "ep")));
    if (c.contains("pattern") && c["pattern"].get_ref<const std::string&>().size() > 64)
      bad("'pattern' of an engine case must have at most 64 characters");
  }
}

}  // namespace ht::verify
