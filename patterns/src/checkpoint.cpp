// Checkpoint key naming (reference section 2.5) and the GPT import map (section 2.5, C1). Every
// member of group L publishes under decoder.layers.L.<its namespace>; ungrouped patterns keep
// the physical index, so their keys are unchanged from main.
#include "ht/patterns/checkpoint.hpp"

#include <set>

#include "ht/patterns/symbols.hpp"

namespace ht::patterns {
namespace {

std::vector<std::string> namespaces_of(char symbol) {
  std::vector<std::string> out;
  for (std::string_view ns : find_symbol(symbol)->namespaces)
    if (!ns.empty()) out.emplace_back(ns);
  return out;
}

}  // namespace

std::vector<std::string> PhysicalLayerKeys::namespace_prefixes() const {
  std::vector<std::string> out;
  for (const auto& ns : namespaces) out.push_back(key_prefix + ns + ".");
  return out;
}

bool namespaces_disjoint(const Item& item) {
  std::set<std::string_view> owned;
  for (char c : item.symbols) {
    const SymbolInfo* s = find_symbol(c);
    if (!s) continue;
    for (std::string_view ns : s->namespaces)
      if (!ns.empty() && !owned.insert(ns).second) return false;
  }
  return true;
}

std::vector<PhysicalLayerKeys> stack_keys(const std::vector<Item>& items, int physical_offset,
                                          std::optional<int> logical_offset) {
  std::vector<PhysicalLayerKeys> out;
  int physical = physical_offset;
  int logical = logical_offset.value_or(physical_offset);
  for (const auto& item : items) {
    for (char c : item.symbols) {
      PhysicalLayerKeys k;
      k.physical = physical++;
      k.logical = logical;
      k.symbol = c;
      k.in_group = item.grouped;
      k.namespaces = namespaces_of(c);
      k.key_prefix = "decoder.layers." + std::to_string(logical) + ".";
      out.push_back(std::move(k));
    }
    ++logical;
  }
  return out;
}

std::vector<PhysicalLayerKeys> layer_keys(const ParsedPattern& parsed) {
  return stack_keys(parsed.items(), 0, 0);
}

std::string final_norm_prefix(const ParsedPattern& parsed) {
  return parsed.has_groups() ? "decoder.final_layernorm." : "decoder.final_norm.";
}

std::vector<std::string> mtp_layer_prefixes(const ParsedPattern& parsed) {
  std::vector<std::string> out;
  for (int d = 0; d < parsed.mtp_depths; ++d) out.push_back("mtp.layers." + std::to_string(d) + ".");
  return out;
}

std::vector<std::string> mtp_inner_prefixes(const ParsedPattern& parsed, int depth) {
  std::vector<std::string> out;
  if (depth < 0 || depth >= parsed.mtp_depths)
    throw PatternError(Rule::BadArgument,
                       "MTP depth " + std::to_string(depth) + " does not exist (the pattern has " +
                           std::to_string(parsed.mtp_depths) + ")",
                       parsed.text, -1);
  for (std::size_t j = 0; j < parsed.mtp_items.size(); ++j)
    out.push_back("mtp.layers." + std::to_string(depth) + ".mtp_model_layer.layers." + std::to_string(j) + ".");
  return out;
}

GptMapping gpt_layer_map(const ParsedPattern& parsed) {
  auto fail = [&](const std::string& message, int position) -> void {
    throw PatternError(Rule::GptImport, message, parsed.text, position);
  };
  if (parsed.mtp_depths > 0)
    fail("a GPT checkpoint has no MTP layers to import into an MTP pattern",
         static_cast<int>(parsed.main.size()));
  GptMapping map;
  bool dense = false, moe = false;
  for (const auto& item : parsed.items()) {
    for (std::size_t k = 0; k < item.symbols.size(); ++k) {
      char c = item.symbols[k];
      int pos = item.position + (item.grouped ? 1 : 0) + static_cast<int>(k);
      if (c != '*' && c != '-' && c != 'E' && c != 'M')
        fail(std::string("'") + c + "' has no counterpart in a GPT checkpoint (only * - E M can be imported)", pos);
      if (c == '-') dense = true;
      if (c == 'E') moe = true;
      if (dense && moe) fail("a GPT checkpoint has either dense MLPs or MoE layers, not both", pos);
    }
  }
  int physical = 0, logical = 0;
  for (const auto& item : parsed.items()) {
    for (char c : item.symbols) {
      if (c == '*') {
        int k = static_cast<int>(map.attention.size());
        map.attention[physical] = k;
        map.by_logical_namespace[{logical, "self_attention"}] = k;
      } else if (c == '-' || c == 'E') {
        int k = static_cast<int>(map.mlp.size());
        map.mlp[physical] = k;
        for (const auto& ns : namespaces_of(c)) map.by_logical_namespace[{logical, ns}] = k;
      } else {
        map.fresh.push_back(physical);
      }
      ++physical;
    }
    ++logical;
  }
  if (map.attention.empty() || map.attention.size() != map.mlp.size())
    fail("a GPT checkpoint pairs each attention layer with one MLP layer, but the pattern has " +
             std::to_string(map.attention.size()) + " attention and " + std::to_string(map.mlp.size()) +
             " MLP/MoE layers",
         -1);
  return map;
}

}  // namespace ht::patterns
