// The one symbol table of the pattern language (reference section 1.1, DEV additions C/H/W).
// Everything that needs to know what a layer character means reads it from here: the parser,
// the checkpoint namer, the schedule builder and the engine.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string_view>

namespace ht::patterns {

// What a layer does, as far as the schedule and the engine care.
enum class LayerKind {
  Mixer,      // M, G: sequence mixers with their own residual
  Attention,  // *, D, +, C, H, W
  Mlp,        // -
  Moe,        // E
};

struct SymbolInfo {
  char symbol;
  std::string_view name;                     // e.g. "mamba", "attention"
  LayerKind kind;
  std::array<std::string_view, 2> namespaces;  // top-level checkpoint namespaces; "" = unused
  bool mla_family;                           // D + C H W: excluded together with '*'
  bool engine_supported;                     // the CPU/CUDA engine implements it
  // Its weight-gradient GEMMs can move to a W node (delayed wgrad): the overlap scheduler has a
  // wgrad callable for it (reference section 3.3's map: the */D/G pre-layers' backward_dw
  // wrappers, M itself, + with #6960, the '-'/'E' terminal's mlp). A plan with delayed wgrad
  // refuses the others rather than leave their weight gradients out (schedule/build.hpp).
  bool defers_wgrad;
};

inline constexpr char kPipe = '|';
inline constexpr char kMtpSeparator = '/';
inline constexpr char kGroupStart = '[';
inline constexpr char kGroupEnd = ']';

// All layer symbols, in Megatron's counts-dict order (* D G M + - E) followed by C H W.
std::span<const SymbolInfo> symbol_table();
// nullptr when c is not a layer symbol.
const SymbolInfo* find_symbol(char c);
bool is_layer_symbol(char c);
// "M, G, *, D, +, C, H, W, -, E": for error messages.
std::string_view valid_symbols_text();

}  // namespace ht::patterns
