// The combined-1F1B order of reference section 3.6, spelled out step by step (see plan_oracle.hpp).
#include "ht/verify/plan_oracle.hpp"

namespace ht::verify {
namespace {

using schedule::Phase;
using schedule::Slot;

char terminal_of(std::string_view s) {
  if (s.empty()) return 0;
  const char last = s.back();
  if (last != '-' && last != 'E') return 0;
  return s.substr(0, s.size() - 1).find_first_of("-E") == std::string_view::npos ? last : 0;
}

class OrderWriter {
 public:
  OrderWriter(const std::vector<std::string>& layers, bool delay, bool early, bool shared)
      : layers_(layers), delay_(delay), early_(early), shared_(shared) {}

  void node(Phase phase, int mb, int layer, Slot slot) {
    if (layer >= 0) {
      const std::string& s = layers_[static_cast<std::size_t>(layer)];
      if (!layer_has_slot(s, false, slot)) return;
      if (phase == Phase::Weight && (!delay_ || !layer_has_weight(s, false, slot, shared_))) return;
    }
    out.push_back({phase, mb, layer, slot});
  }

  // The 13 steps of one layer-level run; f / b are (microbatch, layer) or mb < 0 for "none".
  void layer_run(int f_mb, int f_layer, int b_mb, int b_layer) {
    const bool f = f_mb >= 0, b = b_mb >= 0;
    if (b) node(Phase::Backward, b_mb, b_layer, Slot::MtpPost);      // 1
    if (b) node(Phase::Backward, b_mb, b_layer, Slot::Combine);      // 2
    if (f) node(Phase::Forward, f_mb, f_layer, Slot::PreDispatch);   // 3
    if (b) node(Phase::Backward, b_mb, b_layer, Slot::Mlp);          // 4
    if (f) node(Phase::Forward, f_mb, f_layer, Slot::Dispatch);      // 5
    if (b) node(Phase::Weight, b_mb, b_layer, Slot::Mlp);            // 6
    if (b) node(Phase::Backward, b_mb, b_layer, Slot::Dispatch);     // 7
    if (b && early_) node(Phase::Backward, b_mb, b_layer, Slot::PreDispatch);   // 8
    if (f) node(Phase::Forward, f_mb, f_layer, Slot::Mlp);           // 9
    if (f) node(Phase::Forward, f_mb, f_layer, Slot::Combine);       // 10
    if (b && !early_) node(Phase::Backward, b_mb, b_layer, Slot::PreDispatch);  // 11
    if (f) node(Phase::Forward, f_mb, f_layer, Slot::MtpPost);       // 12
    if (b && b_layer != 0) node(Phase::Weight, b_mb, b_layer, Slot::PreDispatch);  // 13
  }

  // Chunk-level run with forward microbatch f_mb and backward microbatch b_mb (-1: none).
  void chunk_run(int f_mb, int b_mb) {
    const int n = static_cast<int>(layers_.size());
    if (f_mb >= 0) node(Phase::Forward, f_mb, -1, Slot::PreProcess);
    if (b_mb >= 0) node(Phase::Backward, b_mb, -1, Slot::PostProcess);
    const int nf = f_mb >= 0 ? n : 0, nb = b_mb >= 0 ? n : 0;
    const int pairs = std::min(nf, nb);
    for (int i = 0; i < pairs; ++i) layer_run(f_mb, i, b_mb, nb - 1 - i);
    for (int j = nb - 1 - pairs; j >= 0; --j) layer_run(-1, 0, b_mb, j);
    for (int i = pairs; i < nf; ++i) layer_run(f_mb, i, -1, 0);
    if (b_mb >= 0 && n > 0) node(Phase::Weight, b_mb, 0, Slot::PreDispatch);
    if (f_mb >= 0) node(Phase::Forward, f_mb, -1, Slot::PostProcess);
    if (b_mb >= 0) node(Phase::Backward, b_mb, -1, Slot::PreProcess);
  }

  std::vector<ExpectedNode> out;

 private:
  const std::vector<std::string>& layers_;
  bool delay_, early_, shared_;
};

}  // namespace

std::string label(const ExpectedNode& n) {
  const char* phase = n.phase == Phase::Forward ? "F" : n.phase == Phase::Backward ? "B" : "W";
  std::string out = std::string(phase) + " mb" + std::to_string(n.microbatch);
  if (n.layer >= 0) out += " L" + std::to_string(n.layer);
  return out + " " + std::string(schedule::to_string(n.slot));
}

bool layer_has_slot(std::string_view symbols, bool mtp, Slot slot) {
  const char t = terminal_of(symbols);
  const bool pre_layers = symbols.size() > (t ? 1u : 0u);
  switch (slot) {
    case Slot::PreDispatch: return pre_layers || t == 'E' || mtp;
    case Slot::Dispatch:
    case Slot::Combine: return t == 'E';
    case Slot::Mlp: return t != 0;
    case Slot::MtpPost: return mtp;
    default: return false;
  }
}

bool layer_has_weight(std::string_view symbols, bool mtp, Slot slot, bool shared_expert) {
  const char t = terminal_of(symbols);
  const bool pre_layers = symbols.size() > (t ? 1u : 0u);
  if (slot == Slot::PreDispatch) return pre_layers || mtp || (t == 'E' && shared_expert);
  if (slot == Slot::Mlp) return t != 0;
  return false;
}

std::vector<ExpectedNode> combined_1f1b_order(const std::vector<std::string>& layers, int microbatches,
                                              bool delay_wgrad, bool early_attn_release, bool shared_expert) {
  OrderWriter w(layers, delay_wgrad, early_attn_release, shared_expert);
  w.chunk_run(0, -1);                                          // phase 0: forward of mb 0 alone
  for (int k = 1; k < microbatches; ++k) w.chunk_run(k, k - 1);  // forward k with backward k-1
  w.chunk_run(-1, microbatches - 1);                           // the last backward alone
  return std::move(w.out);
}

}  // namespace ht::verify
