// Checkpoint key naming (reference section 2.5): which logical index and namespaces every
// physical layer publishes under, the final norm's name, MTP prefixes, and the GPT import map.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ht/patterns/pattern.hpp"

namespace ht::patterns {

struct PhysicalLayerKeys {
  int physical = 0;                     // global physical index (0-based)
  int logical = 0;                      // logical index used in the sharded key
  char symbol = 0;
  bool in_group = false;
  std::vector<std::string> namespaces;  // e.g. {"pre_mlp_layernorm", "mlp"}
  std::string key_prefix;               // "decoder.layers.<logical>."
  // Full prefixes, one per namespace: "decoder.layers.1.self_attention."
  std::vector<std::string> namespace_prefixes() const;
};

// Keys for every physical layer of the main pattern.
std::vector<PhysicalLayerKeys> layer_keys(const ParsedPattern& parsed);
// Keys for a directly built stack of `items` at a physical offset. The logical offset defaults
// to the physical offset (so an ungrouped direct stack keeps main's physical keys).
std::vector<PhysicalLayerKeys> stack_keys(const std::vector<Item>& items, int physical_offset,
                                          std::optional<int> logical_offset = std::nullopt);
// "decoder.final_layernorm." iff the main pattern contains '[', else "decoder.final_norm.".
std::string final_norm_prefix(const ParsedPattern& parsed);
// "mtp.layers.<depth>." for each MTP depth, and the inner per-layer prefixes
// "mtp.layers.<depth>.mtp_model_layer.layers.<j>.".
std::vector<std::string> mtp_layer_prefixes(const ParsedPattern& parsed);
std::vector<std::string> mtp_inner_prefixes(const ParsedPattern& parsed, int depth);
// True when no group has two members owning the same namespace (G5 holds).
bool namespaces_disjoint(const Item& item);

// GPT import: which hybrid member maps to which GPT layer.
struct GptMapping {
  std::map<int, int> attention;  // physical index of k-th '*' member -> GPT layer k
  std::map<int, int> mlp;        // physical index of k-th '-'/'E' member -> GPT layer k
  std::vector<int> fresh;        // physical indices initialised fresh (M, G)
  // (logical index, namespace) -> GPT layer, how a sharded key resolves
  std::map<std::pair<int, std::string>, int> by_logical_namespace;
};
GptMapping gpt_layer_map(const ParsedPattern& parsed);

}  // namespace ht::patterns
