// Engine checkpoints: a directory with model.safetensors (parameters under the pattern library's
// key names: logical decoder.layers.<L>.* for grouped patterns, physical for ungrouped ones,
// decoder.final_layernorm vs decoder.final_norm by final_norm_prefix()), optimizer.safetensors
// (AdamW moments as "<key>.exp_avg" / "<key>.exp_avg_sq") and manifest.json (format version,
// pattern, config, step, seed, byte size and FNV-1a hash of each file). Each file is written
// atomically and the manifest last, so a checkpoint is complete iff its manifest matches.
// Loading resolves keys through the saved pattern to physical layers (the member of group L
// that owns the key's namespace, reference 2.5), so M[*E]- loads into M*E- and back.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ht/engine/config.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"

namespace ht::engine {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  std::string pattern;
  ModelConfig config;
  std::int64_t step = 0;
  std::uint64_t seed = 0;
};

nlohmann::json config_to_json(const ModelConfig& cfg);
// Unknown fields are an error (a typo must not silently fall back to a default).
ModelConfig config_from_json(const nlohmann::json& j);

// Creates dir if needed. opt may be null (no optimizer file).
void save_checkpoint(const std::string& dir, HybridModel<float>& model,
                     const AdamWState<float>* opt, std::int64_t step, std::uint64_t seed);
// Reads and validates manifest.json only.
CheckpointManifest read_manifest(const std::string& dir);
// Validates everything (manifest, file sizes and hashes, safetensors headers, pattern
// compatibility, missing/extra keys, shapes) before the first value is copied: on any error
// nothing in model or opt has changed. opt null: the optimizer file is not read.
// Returns the manifest.
CheckpointManifest load_checkpoint(const std::string& dir, HybridModel<float>& model,
                                   AdamWState<float>* opt);

// The pattern-independent name of a checkpoint key written under `saved` (e.g. with saved
// "M[*E]-": decoder.layers.1.mlp.router.weight -> layers.2.mlp.router.weight).
std::string canonical_key(const patterns::ParsedPattern& saved, const std::string& key);

// Imports the weights of a GPT model (one safetensors file) via patterns::gpt_layer_map: the k-th
// attention member takes GPT layer k's self_attention.*, the k-th MLP/MoE member its MLP keys;
// Mamba/GDN layers keep their fresh init. The file must use this engine's own parameter names
// with one key per layer index (decoder.layers.<g>.<our name>, decoder.final_layernorm.weight,
// embedding, output layer), not Megatron-LM's or Transformer Engine's spellings; no optimizer
// state is read. Used by the one-rank trainer only. All-or-nothing like load_checkpoint.
void import_gpt(const std::string& safetensors_path, HybridModel<float>& model);

}  // namespace ht::engine
