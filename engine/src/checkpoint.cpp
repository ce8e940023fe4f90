// Checkpoint save/load/import (see checkpoint.hpp for the directory layout and the key rules).
#include "ht/engine/checkpoint.hpp"

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "ht/engine/error.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/checkpoint.hpp"

namespace ht::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "hybrid-twin-checkpoint";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimFile = "optimizer.safetensors";
constexpr const char* kManifest = "manifest.json";

[[noreturn]] void bad(const std::string& what) { throw EngineError(ErrorCode::BadCheckpoint, what); }

std::string fnv1a_file(const std::string& path, std::uint64_t& size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad("cannot open checkpoint file '" + path + "'");
  std::uint64_t h = 0xcbf29ce484222325ull;
  size = 0;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    const auto n = in.gcount();
    for (std::streamsize i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
    size += static_cast<std::uint64_t>(n);
  }
  std::ostringstream s;
  s << std::hex << std::setw(16) << std::setfill('0') << h;
  return s.str();
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw EngineError(ErrorCode::Io, "cannot write '" + tmp + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw EngineError(ErrorCode::Io, "cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

// Field table of ModelConfig for JSON: one line per field keeps save and load in step.
template <class F>
void for_each_config_field(ModelConfig& c, F&& f) {
  f("vocab_size", c.vocab_size);
  f("hidden", c.hidden);
  f("norm_eps", c.norm_eps);
  f("init_std", c.init_std);
  f("num_heads", c.num_heads);
  f("num_kv_heads", c.num_kv_heads);
  f("head_dim", c.head_dim);
  f("rope", c.rope);
  f("rope_theta", c.rope_theta);
  f("window", c.window);
  f("ffn_hidden", c.ffn_hidden);
  f("num_experts", c.num_experts);
  f("moe_topk", c.moe_topk);
  f("moe_ffn_hidden", c.moe_ffn_hidden);
  f("moe_shared_ffn_hidden", c.moe_shared_ffn_hidden);
  f("moe_aux_loss_coeff", c.moe_aux_loss_coeff);
  f("moe_z_loss_coeff", c.moe_z_loss_coeff);
  f("mamba_state_dim", c.mamba_state_dim);
  f("mamba_head_dim", c.mamba_head_dim);
  f("mamba_num_heads", c.mamba_num_heads);
  f("mamba_num_groups", c.mamba_num_groups);
  f("mamba_conv_kernel", c.mamba_conv_kernel);
  f("gdn_num_heads", c.gdn_num_heads);
  f("gdn_num_v_heads", c.gdn_num_v_heads);
  f("gdn_head_dim_qk", c.gdn_head_dim_qk);
  f("gdn_head_dim_v", c.gdn_head_dim_v);
  f("gdn_conv_kernel", c.gdn_conv_kernel);
  f("mla_q_lora_rank", c.mla_q_lora_rank);
  f("mla_kv_lora_rank", c.mla_kv_lora_rank);
  f("mla_qk_head_dim", c.mla_qk_head_dim);
  f("mla_qk_pos_head_dim", c.mla_qk_pos_head_dim);
  f("mla_v_head_dim", c.mla_v_head_dim);
  f("mtp_loss_scaling", c.mtp_loss_scaling);
}

// Values of `file` re-keyed by canonical name, checked against the model's parameters.
std::map<std::string, const Tensor<float>*> match_params(
    const std::map<std::string, Tensor<float>>& by_canonical,
    const std::vector<ParamRef<float>>& params, const std::string& what) {
  std::map<std::string, const Tensor<float>*> out;
  std::vector<std::string> missing;
  for (const auto& p : params) {
    auto it = by_canonical.find(p.canonical);
    if (it == by_canonical.end()) {
      missing.push_back(p.key);
      continue;
    }
    if (it->second.shape != p.value->shape) {
      std::ostringstream s;
      s << what << ": tensor '" << p.key << "' has shape [";
      for (std::size_t i = 0; i < it->second.shape.size(); ++i) s << (i ? "," : "") << it->second.shape[i];
      s << "] but the model needs [";
      for (std::size_t i = 0; i < p.value->shape.size(); ++i) s << (i ? "," : "") << p.value->shape[i];
      s << "]";
      bad(s.str());
    }
    out[p.canonical] = &it->second;
  }
  if (!missing.empty())
    bad(what + ": " + std::to_string(missing.size()) + " parameter(s) missing, first '" + missing.front() + "'");
  if (out.size() != by_canonical.size()) {
    for (const auto& [name, t] : by_canonical)
      if (!out.count(name)) bad(what + ": unexpected tensor '" + name + "' that the model does not have");
  }
  return out;
}

std::map<std::string, Tensor<float>> rekey(const patterns::ParsedPattern& saved,
                                           std::map<std::string, Tensor<float>> tensors,
                                           const std::string& suffix, const std::string& what) {
  std::map<std::string, Tensor<float>> out;
  for (auto& [key, t] : tensors) {
    if (key.size() < suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      bad(what + ": unexpected tensor '" + key + "'");
    std::string canonical;
    try {
      canonical = canonical_key(saved, key.substr(0, key.size() - suffix.size()));
    } catch (const EngineError& e) {
      bad(what + ": " + e.what());
    }
    if (!out.emplace(canonical, std::move(t)).second) bad(what + ": two tensors map to '" + canonical + "'");
  }
  return out;
}

}  // namespace

json config_to_json(const ModelConfig& cfg) {
  json j = json::object();
  ModelConfig c = cfg;
  for_each_config_field(c, [&](const char* name, auto& v) { j[name] = v; });
  return j;
}

ModelConfig config_from_json(const json& j) {
  if (!j.is_object()) bad("config is not a JSON object");
  ModelConfig c;
  std::set<std::string> known;
  for_each_config_field(c, [&](const char* name, auto& v) {
    known.insert(name);
    if (!j.contains(name)) return;
    try {
      v = j.at(name).get<std::decay_t<decltype(v)>>();
    } catch (const std::exception&) {
      bad(std::string("config field '") + name + "' has the wrong type");
    }
  });
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!known.count(it.key())) bad("unknown config field '" + it.key() + "'");
  return c;
}

std::string canonical_key(const patterns::ParsedPattern& saved, const std::string& key) {
  const std::string layers = "decoder.layers.";
  if (key.rfind(layers, 0) == 0) {
    const auto dot = key.find('.', layers.size());
    if (dot == std::string::npos) bad("malformed key '" + key + "'");
    int logical = -1;
    try {
      logical = std::stoi(key.substr(layers.size(), dot - layers.size()));
    } catch (const std::exception&) {
      bad("malformed layer index in key '" + key + "'");
    }
    const std::string rest = key.substr(dot + 1);
    const std::string ns = rest.substr(0, rest.find('.'));
    for (const auto& k : patterns::layer_keys(saved))
      if (k.logical == logical)
        for (const auto& owned : k.namespaces)
          if (owned == ns) return "layers." + std::to_string(k.physical) + "." + rest;
    bad("key '" + key + "' names no layer of pattern '" + saved.text + "'");
  }
  if (key == patterns::final_norm_prefix(saved) + "weight") return "decoder.final_norm.weight";
  return key;
}

void save_checkpoint(const std::string& dir, HybridModel<float>& model,
                     const AdamWState<float>* opt, std::int64_t step, std::uint64_t seed) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw EngineError(ErrorCode::Io, "cannot create checkpoint directory '" + dir + "': " + ec.message());
  auto params = model.parameters();
  std::vector<std::pair<std::string, const Tensor<float>*>> tensors;
  for (const auto& p : params) tensors.emplace_back(p.key, p.value);
  const std::map<std::string, std::string> meta{{"format", kFormat}, {"pattern", model.pattern().text}};
  json files = json::object();
  auto record = [&](const char* name) {
    std::uint64_t size = 0;
    const std::string hash = fnv1a_file((fs::path(dir) / name).string(), size);
    files[name] = {{"bytes", size}, {"fnv1a64", hash}};
  };
  write_safetensors((fs::path(dir) / kModelFile).string(), tensors, meta);
  record(kModelFile);
  if (opt) {
    std::vector<Tensor<float>> zeros;
    zeros.reserve(params.size());
    std::vector<std::pair<std::string, const Tensor<float>*>> moments;
    for (const auto& p : params) {
      auto m = opt->exp_avg.find(p.canonical);
      auto v = opt->exp_avg_sq.find(p.canonical);
      if (m == opt->exp_avg.end() || v == opt->exp_avg_sq.end()) {
        zeros.emplace_back(p.value->shape);  // no step taken yet: zero moments
        moments.emplace_back(p.key + ".exp_avg", &zeros.back());
        moments.emplace_back(p.key + ".exp_avg_sq", &zeros.back());
      } else {
        moments.emplace_back(p.key + ".exp_avg", &m->second);
        moments.emplace_back(p.key + ".exp_avg_sq", &v->second);
      }
    }
    write_safetensors((fs::path(dir) / kOptimFile).string(), moments,
                      {{"format", kFormat}, {"step", std::to_string(opt->step)}});
    record(kOptimFile);
  }
  json manifest = {{"format", kFormat},
                   {"format_version", kCheckpointFormatVersion},
                   {"pattern", model.pattern().text},
                   {"config", config_to_json(model.config())},
                   {"step", step},
                   {"seed", seed},
                   {"files", files}};
  write_text_atomically((fs::path(dir) / kManifest).string(), manifest.dump(2) + "\n");
}

CheckpointManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::ifstream in(path);
  if (!in) bad("no checkpoint at '" + dir + "' (cannot open " + kManifest + ")");
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    bad("'" + path + "' is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || j.value("format", "") != kFormat) bad("'" + path + "' is not a hybrid-twin checkpoint manifest");
  CheckpointManifest m;
  try {
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != kCheckpointFormatVersion)
      bad("checkpoint format version " + std::to_string(m.format_version) + " is not supported (this build reads " +
          std::to_string(kCheckpointFormatVersion) + ")");
    m.pattern = j.at("pattern").get<std::string>();
    m.config = config_from_json(j.at("config"));
    m.step = j.at("step").get<std::int64_t>();
    m.seed = j.at("seed").get<std::uint64_t>();
    if (!j.at("files").is_object() || !j.at("files").contains(kModelFile)) bad("manifest lists no " + std::string(kModelFile));
  } catch (const json::exception& e) {
    bad("'" + path + "' lacks a field or has a wrong type (" + e.what() + ")");
  }
  return m;
}

CheckpointManifest load_checkpoint(const std::string& dir, HybridModel<float>& model,
                                   AdamWState<float>* opt) {
  const CheckpointManifest m = read_manifest(dir);
  json files;
  {
    std::ifstream in((fs::path(dir) / kManifest).string());
    files = json::parse(in).at("files");
  }
  auto verify = [&](const char* name) {
    if (!files.contains(name)) bad("manifest of '" + dir + "' lists no " + name);
    std::uint64_t size = 0;
    const std::string path = (fs::path(dir) / name).string();
    const std::string hash = fnv1a_file(path, size);
    if (size != files[name].value("bytes", std::uint64_t{0}))
      bad("'" + path + "' has " + std::to_string(size) + " bytes, the manifest says " +
          std::to_string(files[name].value("bytes", std::uint64_t{0})) + " (truncated or replaced)");
    if (hash != files[name].value("fnv1a64", std::string()))
      bad("'" + path + "' does not match the hash in the manifest (corrupted)");
    return path;
  };

  const patterns::ParsedPattern saved = patterns::parse(m.pattern);
  const auto& target = model.pattern();
  if (saved.flattened_symbols() != target.flattened_symbols() || saved.mtp != target.mtp ||
      saved.mtp_depths != target.mtp_depths)
    bad("checkpoint pattern '" + m.pattern + "' does not have the physical layers of the model pattern '" +
        target.text + "' (only grouping may differ)");

  auto params = model.parameters();
  auto model_file = read_safetensors(verify(kModelFile));
  const auto values = rekey(saved, std::move(model_file.tensors), "", std::string(kModelFile));
  const auto matched = match_params(values, params, std::string(kModelFile));

  std::map<std::string, Tensor<float>> m1, m2;
  std::int64_t opt_step = 0;
  if (opt) {
    auto opt_file = read_safetensors(verify(kOptimFile));
    std::map<std::string, Tensor<float>> avg, sq;
    for (auto& [k, t] : opt_file.tensors) {
      if (k.size() > 11 && k.compare(k.size() - 11, 11, ".exp_avg_sq") == 0)
        sq.emplace(k, std::move(t));
      else
        avg.emplace(k, std::move(t));
    }
    m1 = rekey(saved, std::move(avg), ".exp_avg", kOptimFile);
    m2 = rekey(saved, std::move(sq), ".exp_avg_sq", kOptimFile);
    match_params(m1, params, std::string(kOptimFile) + " (exp_avg)");
    match_params(m2, params, std::string(kOptimFile) + " (exp_avg_sq)");
    try {
      opt_step = std::stoll(opt_file.metadata.at("step"));
    } catch (const std::exception&) {
      bad(std::string(kOptimFile) + " lacks a valid 'step' in its metadata");
    }
  }
  // Everything validated: commit.
  for (auto& p : params) *p.value = *matched.at(p.canonical);
  if (opt) {
    opt->step = opt_step;
    opt->exp_avg = std::move(m1);
    opt->exp_avg_sq = std::move(m2);
  }
  return m;
}

void import_gpt(const std::string& safetensors_path, HybridModel<float>& model) {
  const auto map = patterns::gpt_layer_map(model.pattern());
  auto file = read_safetensors(safetensors_path);
  auto params = model.parameters();
  std::vector<std::pair<Tensor<float>*, const Tensor<float>*>> plan;
  std::set<std::string> used;
  for (auto& p : params) {
    std::string src = p.canonical;
    if (p.canonical.rfind("layers.", 0) == 0) {
      const auto dot = p.canonical.find('.', 7);
      const int phys = std::stoi(p.canonical.substr(7, dot - 7));
      const std::string rest = p.canonical.substr(dot + 1);
      int gpt = -1;
      if (auto a = map.attention.find(phys); a != map.attention.end()) gpt = a->second;
      if (auto b = map.mlp.find(phys); b != map.mlp.end()) gpt = b->second;
      if (gpt < 0) continue;  // fresh layer (Mamba, GDN): keeps its init
      src = "decoder.layers." + std::to_string(gpt) + "." + rest;
    } else if (p.canonical == "decoder.final_norm.weight") {
      src = "decoder.final_layernorm.weight";
    }
    auto it = file.tensors.find(src);
    if (it == file.tensors.end()) bad("GPT checkpoint '" + safetensors_path + "' lacks '" + src + "' needed for '" + p.key + "'");
    if (it->second.shape != p.value->shape)
      bad("GPT checkpoint '" + safetensors_path + "': '" + src + "' has a different shape than '" + p.key + "'");
    used.insert(src);
    plan.emplace_back(p.value, &it->second);
  }
  for (const auto& [name, t] : file.tensors)
    if (!used.count(name)) bad("GPT checkpoint '" + safetensors_path + "' has tensor '" + name + "' that maps to no layer of '" + model.pattern().text + "'");
  for (auto& [dst, src] : plan) *dst = *src;
}

}  // namespace ht::engine
