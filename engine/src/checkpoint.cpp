// Checkpoint save/load/import (see checkpoint.hpp for the directory layout and the key rules).
#include "ht/engine/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "ht/engine/error.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"
#include "ht/patterns/checkpoint.hpp"

namespace ht::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "hybrid-twin-checkpoint";
constexpr const char* kManifest = "manifest.json";

[[noreturn]] void bad(const std::string& what) { throw EngineError(ErrorCode::BadCheckpoint, what); }

// Names of the files one checkpoint generation writes; the manifest names the live ones.
std::string generation_file(const char* role, std::int64_t generation) {
  char text[64];
  std::snprintf(text, sizeof text, "%s-%06lld.safetensors", role, static_cast<long long>(generation));
  return text;
}

// Our own names in a checkpoint folder (any generation, format 1's fixed names, and the temporary
// files of interrupted writes): the only files a save ever removes.
bool is_checkpoint_litter(const std::string& name) {
  static const std::regex ours(R"(^(model|optimizer)(-[0-9]+)?\.safetensors(\.tmp-[0-9]+-[0-9]+)?$|^manifest\.json\.tmp-[0-9]+-[0-9]+$|^\.write-probe\.tmp-[0-9]+-[0-9]+$)");
  return std::regex_match(name, ours);
}

// A manifest may only name plain files of this folder.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.size() < 256 && name.find('/') == std::string::npos && name != "." && name != "..";
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
    using V = std::decay_t<decltype(v)>;
    const json& x = j.at(name);
    // Numbers only, and what a model can be built from: no negative sizes, no NaN or Inf
    // factors (sizes too large for memory are refused by check_training_memory).
    const bool ok = std::is_same_v<V, bool> ? x.is_boolean()
                    : std::is_integral_v<V> ? x.is_number_integer() && x.get<long long>() >= 0 &&
                                                  x.get<long long>() <= std::numeric_limits<int>::max()
                                            : x.is_number() && std::isfinite(x.get<double>()) &&
                                                  std::fabs(x.get<double>()) <= 3e38;
    if (!ok)
      bad(std::string("config field '") + name + "' = " + x.dump() +
          (std::is_same_v<V, bool>            ? " is not true or false"
           : std::is_integral_v<V> ? " is not an integer in [0, 2^31)"
                                   : " is not a finite number"));
    v = x.get<V>();
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

namespace {

struct FileEntry {
  std::string file;
  std::uint64_t bytes = 0;
  std::string fnv1a64;
};

struct Manifest {
  CheckpointManifest m;
  FileEntry model;
  std::optional<FileEntry> optimizer;
};

std::string manifest_path(const std::string& dir) { return (fs::path(dir) / kManifest).string(); }

// files[role]: format 2 {"model": {"file", "bytes", "fnv1a64"}}, format 1 {"model.safetensors":
// {"bytes", "fnv1a64"}} (the file named by the key).
std::optional<FileEntry> file_entry(const json& files, int version, const char* role, const std::string& path) {
  const std::string key = version == 1 ? std::string(role) + ".safetensors" : std::string(role);
  if (!files.contains(key)) return std::nullopt;
  const json& e = files.at(key);
  FileEntry f;
  if (!e.is_object() || !e.contains("bytes") || !e["bytes"].is_number_unsigned() || !e.contains("fnv1a64") ||
      !e["fnv1a64"].is_string())
    bad("'" + path + "': files." + key + " must hold \"bytes\" (an integer >= 0) and \"fnv1a64\" (a string)");
  f.bytes = e["bytes"].get<std::uint64_t>();
  f.fnv1a64 = e["fnv1a64"].get<std::string>();
  if (version == 1) {
    f.file = key;
  } else {
    if (!e.contains("file") || !e["file"].is_string() || !is_plain_file_name(e["file"].get<std::string>()))
      bad("'" + path + "': files." + key + ".file must name a file of the checkpoint folder");
    f.file = e["file"].get<std::string>();
  }
  return f;
}

Manifest load_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  json j;
  try {
    j = io::read_json_file(path, io::kJsonFileLimit, "checkpoint manifest");
  } catch (const io::IoError& e) {
    if (e.code() == io::IoErrorCode::Open) bad("no checkpoint at '" + dir + "' (" + e.what() + ")");
    bad(e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat) bad("'" + path + "' is not a hybrid-twin checkpoint manifest");
  Manifest out;
  CheckpointManifest& m = out.m;
  try {
    m.format_version = j.at("format_version").get<int>();
    if (m.format_version != 1 && m.format_version != kCheckpointFormatVersion)
      bad("checkpoint format version " + std::to_string(m.format_version) + " is not supported (this build reads 1 and " +
          std::to_string(kCheckpointFormatVersion) + ")");
    m.pattern = j.at("pattern").get<std::string>();
    m.config = config_from_json(j.at("config"));
    m.step = j.at("step").get<std::int64_t>();
    m.seed = j.at("seed").get<std::uint64_t>();
    m.generation = j.contains("generation") ? j.at("generation").get<std::int64_t>() : 0;
    if (!j.at("files").is_object()) bad("'" + path + "': \"files\" is not an object");
  } catch (const json::exception& e) {
    bad("'" + path + "' lacks a field or has a wrong type (" + io::json_error_text(e) + ")");
  }
  if (m.step < 0 || m.step > kMaxCheckpointStep)
    bad("'" + path + "': step " + std::to_string(m.step) + " is outside [0, 2^53] (a step counter cannot be negative, "
        "and a larger one would overflow the next run's step numbers)");
  if (m.generation < 0 || m.generation > kMaxCheckpointStep)
    bad("'" + path + "': generation " + std::to_string(m.generation) + " is outside [0, 2^53]");
  const auto model = file_entry(j.at("files"), m.format_version, "model", path);
  if (!model) bad("manifest of '" + dir + "' lists no model file");
  out.model = *model;
  out.optimizer = file_entry(j.at("files"), m.format_version, "optimizer", path);
  return out;
}

// Opens a data file the manifest names: a regular file of at most `limit` bytes whose size and
// FNV-1a hash match the manifest (checked in one bounded pass), then parsed from the same handle.
SafetensorsFile read_verified(const std::string& dir, const FileEntry& f, std::uint64_t limit) {
  const std::string path = (fs::path(dir) / f.file).string();
  if (f.bytes > limit)
    bad("'" + manifest_path(dir) + "' says '" + f.file + "' has " + std::to_string(f.bytes) +
        " bytes, more than this model's parameters can fill (" + io::format_bytes(limit) + ")");
  try {
    io::InputFile in(path, limit, "checkpoint file");
    if (in.size() != f.bytes)
      bad("'" + path + "' has " + std::to_string(in.size()) + " bytes, the manifest says " + std::to_string(f.bytes) +
          " (truncated or replaced)");
    std::uint64_t h = kFnvOffset;
    std::vector<char> chunk(1 << 16);
    for (std::size_t n; (n = in.read(chunk.data(), chunk.size())) > 0;) h = fnv1a_update(h, chunk.data(), n);
    if (fnv1a_hex(h) != f.fnv1a64) bad("'" + path + "' does not match the hash in the manifest (corrupted)");
    return read_safetensors(in);
  } catch (const io::IoError& e) {
    bad(e.what());
  }
}

// What training can start from: finite values, weights within kMaxCheckpointWeight, second moments
// >= 0. NaN, Inf or 3e38 would only turn the next step's loss into nan.
void check_values(const std::string& what, const std::map<std::string, Tensor<float>>& tensors, double max_abs,
                  bool non_negative) {
  for (const auto& [name, t] : tensors)
    for (std::size_t i = 0; i < t.size(); ++i) {
      const float v = t[i];
      std::string problem;
      if (std::isnan(v)) problem = "NaN";
      else if (std::isinf(v)) problem = "an infinity";
      else if (std::fabs(v) > max_abs) {
        char text[128];
        std::snprintf(text, sizeof text, "%g, beyond the bound %g of a trainable value", double(v), max_abs);
        problem = text;
      }
      else if (non_negative && v < 0) problem = std::to_string(v) + " (a second moment is never negative)";
      if (!problem.empty())
        bad(what + ": tensor '" + name + "' holds " + problem + " at element " + std::to_string(i) +
            "; the checkpoint cannot be trained from");
    }
}

std::uint64_t parameter_bytes(HybridModel<float>& model) {
  return static_cast<std::uint64_t>(model.num_parameters()) * sizeof(float);
}

// A safetensors header of our own files is a few hundred bytes per tensor; the reader's own cap.
constexpr std::uint64_t kHeaderAllowance = 100u << 20;

}  // namespace

void save_checkpoint(const std::string& dir, HybridModel<float>& model,
                     const AdamWState<float>* opt, std::int64_t step, std::uint64_t seed) {
  if (step < 0 || step > kMaxCheckpointStep)
    throw EngineError(ErrorCode::BadInput, "checkpoint step " + std::to_string(step) + " is outside [0, 2^53]");
  try {
    io::check_output_directory(dir, "checkpoint directory");
  } catch (const io::IoError& e) {
    throw EngineError(ErrorCode::Io, e.what());
  }
  // One generation past the live manifest's: its files are new names, so the live checkpoint is
  // untouched until the manifest's rename switches to the new one in one step.
  std::int64_t generation = 1;
  try {
    generation = load_manifest(dir).m.generation + 1;
  } catch (const EngineError&) {
  }
  auto params = model.parameters();
  std::vector<std::pair<std::string, const Tensor<float>*>> tensors;
  for (const auto& p : params) tensors.emplace_back(p.key, p.value);
  const std::map<std::string, std::string> meta{{"format", kFormat}, {"pattern", model.pattern().text}};
  json files = json::object();
  std::vector<std::string> created;  // removed again unless the manifest commits them
  auto record = [&](const char* role, const std::string& name, const WrittenFile& w) {
    files[role] = {{"file", name}, {"bytes", w.bytes}, {"fnv1a64", w.fnv1a64}};
  };
  try {
    const std::string model_name = generation_file("model", generation);
    created.push_back(model_name);
    record("model", model_name, write_safetensors((fs::path(dir) / model_name).string(), tensors, meta));
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
      const std::string optim_name = generation_file("optimizer", generation);
      created.push_back(optim_name);
      record("optimizer", optim_name,
             write_safetensors((fs::path(dir) / optim_name).string(), moments,
                               {{"format", kFormat}, {"step", std::to_string(opt->step)}}));
    }
    const json manifest = {{"format", kFormat},
                           {"format_version", kCheckpointFormatVersion},
                           {"pattern", model.pattern().text},
                           {"config", config_to_json(model.config())},
                           {"step", step},
                           {"seed", seed},
                           {"generation", generation},
                           {"files", files}};
    io::write_output_file(manifest_path(dir), "checkpoint manifest", manifest.dump(2) + "\n",
                          io::OutputOptions{.durable = true});  // the switch
  } catch (...) {
    std::error_code ignored;
    for (const auto& name : created) fs::remove(fs::path(dir) / name, ignored);
    try {
      throw;
    } catch (const io::IoError& e) {
      if (e.code() == io::IoErrorCode::Interrupted) throw;
      throw EngineError(ErrorCode::Io, e.what());
    }
  }
  // The previous generation, format 1's fixed names and temporary files of interrupted writes.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_checkpoint_litter(name) && std::find(created.begin(), created.end(), name) == created.end())
      fs::remove(it->path(), ec);
  }
}

CheckpointManifest read_manifest(const std::string& dir) { return load_manifest(dir).m; }

CheckpointManifest load_checkpoint(const std::string& dir, HybridModel<float>& model,
                                   AdamWState<float>* opt) {
  const Manifest manifest = load_manifest(dir);
  const CheckpointManifest& m = manifest.m;
  const patterns::ParsedPattern saved = patterns::parse(m.pattern);
  const auto& target = model.pattern();
  if (saved.flattened_symbols() != target.flattened_symbols() || saved.mtp != target.mtp ||
      saved.mtp_depths != target.mtp_depths)
    bad("checkpoint pattern '" + m.pattern + "' does not have the physical layers of the model pattern '" +
        target.text + "' (only grouping may differ)");

  auto params = model.parameters();
  const std::uint64_t weights = parameter_bytes(model);
  auto model_file = read_verified(dir, manifest.model, weights + kHeaderAllowance);
  const auto values = rekey(saved, std::move(model_file.tensors), "", manifest.model.file);
  const auto matched = match_params(values, params, manifest.model.file);
  check_values(manifest.model.file, values, kMaxCheckpointWeight, false);

  std::map<std::string, Tensor<float>> m1, m2;
  std::int64_t opt_step = 0;
  if (opt) {
    if (!manifest.optimizer) bad("manifest of '" + dir + "' lists no optimizer file");
    auto opt_file = read_verified(dir, *manifest.optimizer, 2 * weights + kHeaderAllowance);
    std::map<std::string, Tensor<float>> avg, sq;
    for (auto& [k, t] : opt_file.tensors) {
      if (k.size() > 11 && k.compare(k.size() - 11, 11, ".exp_avg_sq") == 0)
        sq.emplace(k, std::move(t));
      else
        avg.emplace(k, std::move(t));
    }
    const std::string& optim_name = manifest.optimizer->file;
    m1 = rekey(saved, std::move(avg), ".exp_avg", optim_name);
    m2 = rekey(saved, std::move(sq), ".exp_avg_sq", optim_name);
    match_params(m1, params, optim_name + " (exp_avg)");
    match_params(m2, params, optim_name + " (exp_avg_sq)");
    check_values(manifest.optimizer->file + " (exp_avg)", m1, kMaxCheckpointMoment, false);
    check_values(manifest.optimizer->file + " (exp_avg_sq)", m2, kMaxCheckpointMoment, true);
    const auto it = opt_file.metadata.find("step");
    const std::string text = it == opt_file.metadata.end() ? "" : it->second;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), opt_step);
    if (text.empty() || err != std::errc() || end != text.data() + text.size() || opt_step < 0 ||
        opt_step > kMaxCheckpointStep)
      bad(manifest.optimizer->file + ": metadata 'step' = '" + text + "' is not an optimizer step in [0, 2^53]");
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
  // The file must hold exactly this model's attention/MLP tensors, so its size is bounded by them.
  auto file = read_safetensors(safetensors_path, parameter_bytes(model) + kHeaderAllowance);
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
