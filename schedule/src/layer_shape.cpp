// Splitting a logical layer into slots and the O1 overlap check (reference section 3.3).
#include "ht/schedule/layer_shape.hpp"

#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

bool is_terminal(char c) { return c == '-' || c == 'E'; }

// Pre-layer types the overlap builder can run in pre_dispatch (section 3.3; '+' after #6960).
bool overlap_pre_layer(char c) { return c == 'M' || c == '*' || c == 'D' || c == 'G' || c == '+'; }

}  // namespace

bool LayerShape::has_slot(Slot slot) const {
  switch (slot) {
    case Slot::PreDispatch: return !pre.empty() || moe() || mtp;
    case Slot::Dispatch:
    case Slot::Combine: return moe();
    case Slot::Mlp: return terminal != 0;
    case Slot::MtpPost: return mtp;
    default: return false;
  }
}

bool LayerShape::has_weight_grad(Slot slot, bool shared_expert) const {
  switch (slot) {
    case Slot::PreDispatch: return !pre.empty() || mtp || (moe() && shared_expert);
    case Slot::Mlp: return terminal != 0;
    default: return false;
  }
}

LayerShape split_layer(std::string_view symbols, bool mtp) {
  LayerShape shape;
  shape.symbols = std::string(symbols);
  shape.mtp = mtp;
  const std::size_t first_terminal = symbols.find_first_of("-E");
  if (!symbols.empty() && first_terminal == symbols.size() - 1) {
    shape.pre = std::string(symbols.substr(0, symbols.size() - 1));
    shape.terminal = symbols.back();
  } else {
    shape.pre = std::string(symbols);
  }
  return shape;
}

void check_overlap_splittable(std::string_view symbols, const std::string& where) {
  const std::string text(symbols);
  for (std::size_t i = 0; i < symbols.size(); ++i) {
    const char c = symbols[i];
    const bool last = i + 1 == symbols.size();
    if (is_terminal(c)) {
      if (last) continue;
      throw ScheduleError(ErrorCode::O1_OverlapLayerShape,
                          "the overlap schedule needs the MLP/MoE symbol '" + std::string(1, c) +
                              "' to be the last layer of its group, but " + where + " is [" +
                              text + "]");
    }
    if (!overlap_pre_layer(c))
      throw ScheduleError(ErrorCode::O1_OverlapLayerShape,
                          "the overlap schedule cannot run layer type '" + std::string(1, c) +
                              "' before the terminal MLP/MoE (allowed: M, *, D, G, +); " + where +
                              " is [" + text + "]");
  }
}

}  // namespace ht::schedule
