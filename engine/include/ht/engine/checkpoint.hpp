// Engine checkpoints: a directory with manifest.json (format version, pattern, config, step, seed,
// generation, and for each data file its name, byte size and FNV-1a hash), the parameters
// (model-<generation>.safetensors, under the pattern library's key names: logical
// decoder.layers.<L>.* for grouped patterns, physical for ungrouped ones, decoder.final_layernorm vs
// decoder.final_norm by final_norm_prefix()) and the AdamW moments
// (optimizer-<generation>.safetensors, "<key>.exp_avg" / "<key>.exp_avg_sq").
//
// Saving switches from the old state to the new one in one atomic step: the data files of a new
// generation are written under new names (fsync'ed), then the manifest is renamed over the old
// one; only after that are the previous generation's files removed. An interruption (SIGINT,
// SIGTERM, a full disk, a crash) at any point leaves the last committed checkpoint loadable;
// files of an interrupted save are removed by the save itself or by the next one. Format 1
// (fixed names model.safetensors / optimizer.safetensors) is still read.
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

inline constexpr int kCheckpointFormatVersion = 2;
// Steps and generations are counted in [0, 2^53]: exact in a double, and a resumed run's step
// numbers cannot overflow.
inline constexpr std::int64_t kMaxCheckpointStep = std::int64_t{1} << 53;
// Largest |value| a loaded parameter may hold (a trained model's are below 10; larger ones overflow
// float32 activations within a few layers), and AdamW moments.
inline constexpr double kMaxCheckpointWeight = 1e6;
inline constexpr double kMaxCheckpointMoment = 1e12;

struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;
  std::string pattern;
  ModelConfig config;
  std::int64_t step = 0;
  std::uint64_t seed = 0;
  std::int64_t generation = 0;  // format 2: counts saves into this folder
};

nlohmann::json config_to_json(const ModelConfig& cfg);
// Unknown fields are an error (a typo must not silently fall back to a default).
ModelConfig config_from_json(const nlohmann::json& j);

// Creates dir if needed. opt may be null (no optimizer file). EngineError(Io) when the folder or a
// file cannot be written (the previous checkpoint stays as it was); ht::io::IoError(Interrupted)
// when a deferred SIGINT/SIGTERM stopped the save (the same).
void save_checkpoint(const std::string& dir, HybridModel<float>& model,
                     const AdamWState<float>* opt, std::int64_t step, std::uint64_t seed);
// Reads and validates manifest.json only.
CheckpointManifest read_manifest(const std::string& dir);
// Validates everything (manifest, steps, regular files of bounded size, file sizes and hashes,
// safetensors headers, pattern compatibility, missing/extra keys, shapes, finite values within
// kMaxCheckpointWeight, non-negative second moments) before the first value is copied: on any error
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
