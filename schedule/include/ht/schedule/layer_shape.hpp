// How one logical layer splits into the five slots of its layer plan (reference section 3.3):
// pre-layers run in pre_dispatch, a terminal '-' or 'E' owns the mlp slot, and only an 'E'
// terminal has dispatch/combine all-to-alls. MTP depths add their embedding/eh_proj work to
// pre_dispatch and own mtp_post.
#pragma once

#include <string>
#include <string_view>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

struct LayerShape {
  std::string symbols;  // all physical symbols of the logical layer, e.g. "M*E"
  std::string pre;      // symbols that run in pre_dispatch, e.g. "M*"
  char terminal = 0;    // '-', 'E', or 0 when the layer is mixer/attention only
  bool mtp = false;     // an MTP depth (its symbols are the MTP pattern)

  bool moe() const { return terminal == 'E'; }
  // Whether the slot does any work; slots without work get no node (the slot order is kept).
  bool has_slot(Slot slot) const;
  // Whether the slot has weight gradients that a delayed W node computes: pre-layers, the shared
  // expert and MTP's eh_proj for pre_dispatch; experts or the dense MLP for mlp.
  bool has_weight_grad(Slot slot, bool shared_expert) const;
  bool operator==(const LayerShape&) const = default;
};

// Splits a logical layer. The terminal is the last symbol when it is '-' or 'E' and no other
// '-'/'E' precedes it; otherwise (only legal without overlap, e.g. "[-*]") everything runs in
// pre_dispatch as one unit.
LayerShape split_layer(std::string_view symbols, bool mtp);

// O1: throws ScheduleError when the overlap builder cannot split the layer: an MLP/MoE symbol
// that is not last, or a pre-layer outside {M, *, D, G, +}. `where` names the layer in the message.
void check_overlap_splittable(std::string_view symbols, const std::string& where);

}  // namespace ht::schedule
