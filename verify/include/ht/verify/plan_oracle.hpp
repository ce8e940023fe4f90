// Independent oracles for schedule plans, written from reference sections 3.3 and 3.6 rather
// than from the builder: which slots a logical layer has, which of them own delayed weight
// gradients, and the full issue order of the combined 1F1B schedule on one pipeline stage.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ht/schedule/plan.hpp"

namespace ht::verify {

// One node as the oracle names it (pipeline and all-reduce nodes are not part of it).
struct ExpectedNode {
  schedule::Phase phase;
  int microbatch;
  int layer;  // -1 for pre_process / post_process
  schedule::Slot slot;
  bool operator==(const ExpectedNode&) const = default;
};
std::string label(const ExpectedNode& n);

// Reference 3.3: pre_dispatch runs the pre-layers (and the MoE preprocess, and MTP's embedding);
// dispatch/combine exist for an 'E' terminal only; mlp for a '-' or 'E' terminal. The terminal
// is the last symbol when it is '-'/'E' and no other '-'/'E' precedes it.
bool layer_has_slot(std::string_view symbols, bool mtp, schedule::Slot slot);
// Delayed W ownership: pre_dispatch owns the pre-layers', the shared expert's and eh_proj's
// weight gradients; mlp owns the experts' or dense MLP's.
bool layer_has_weight(std::string_view symbols, bool mtp, schedule::Slot slot, bool shared_expert);

// The issue order of every rank of a combined-1F1B plan with PP = 1 (reference 3.6: phase 0
// forward alone, then forward k with backward k-1 layer by layer in the 13 steps, then the last
// backward alone; the first layer's pre_dispatch W deferred to the end of each chunk run).
// `layers` holds each logical layer's symbols in model order.
std::vector<ExpectedNode> combined_1f1b_order(const std::vector<std::string>& layers, int microbatches,
                                              bool delay_wgrad, bool early_attn_release, bool shared_expert);

}  // namespace ht::verify
