// The symbol table itself (reference section 1.1 plus the DEV-branch C/H/W symbols).
#include "ht/patterns/symbols.hpp"

#include <algorithm>

namespace ht::patterns {
namespace {

constexpr std::string_view kAttnNs = "self_attention";
constexpr std::string_view kInputLnNs = "input_layernorm";

// Order: Megatron's counts-dict order (* D G M + - E), then the DEV symbols C H W.
constexpr std::array<SymbolInfo, 10> kTable{{
    {'*', "attention", LayerKind::Attention, {kAttnNs, ""}, false, true, true},
    {'D', "ds_attention", LayerKind::Attention, {kInputLnNs, kAttnNs}, true, false, true},
    {'G', "gdn", LayerKind::Mixer, {kAttnNs, ""}, false, true, true},
    {'M', "mamba", LayerKind::Mixer, {"mixer", ""}, false, true, true},
    {'+', "mla", LayerKind::Attention, {kInputLnNs, kAttnNs}, true, true, true},
    {'-', "mlp", LayerKind::Mlp, {"mlp", ""}, false, true, true},
    {'E', "moe", LayerKind::Moe, {"pre_mlp_layernorm", "mlp"}, false, true, true},
    {'C', "csa", LayerKind::Attention, {kInputLnNs, kAttnNs}, true, false, false},
    {'H', "hca", LayerKind::Attention, {kInputLnNs, kAttnNs}, true, false, false},
    {'W', "window_attention", LayerKind::Attention, {kInputLnNs, kAttnNs}, true, true, false},
}};

}  // namespace

std::span<const SymbolInfo> symbol_table() { return kTable; }

const SymbolInfo* find_symbol(char c) {
  auto it = std::find_if(kTable.begin(), kTable.end(), [c](const SymbolInfo& s) { return s.symbol == c; });
  return it == kTable.end() ? nullptr : &*it;
}

bool is_layer_symbol(char c) { return find_symbol(c) != nullptr; }

std::string_view valid_symbols_text() { return "M G * D + C H W - E"; }

}  // namespace ht::patterns
