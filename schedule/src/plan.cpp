// Names of the plan enums and node labels (see plan.hpp).
#include "ht/schedule/plan.hpp"

#include <array>
#include <utility>

namespace ht::schedule {
namespace {

template <typename E, std::size_t N>
std::optional<E> lookup(const std::array<std::pair<E, std::string_view>, N>& table,
                        std::string_view name) {
  for (const auto& [value, text] : table)
    if (text == name) return value;
  return std::nullopt;
}

template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [v, text] : table)
    if (v == value) return text;
  return "?";
}

constexpr std::array<std::pair<Stream, std::string_view>, 2> kStreams{{
    {Stream::Compute, "compute"}, {Stream::Comm, "comm"}}};
constexpr std::array<std::pair<Slot, std::string_view>, 10> kSlots{{
    {Slot::PreProcess, "pre_process"},
    {Slot::PreDispatch, "pre_dispatch"},
    {Slot::Dispatch, "dispatch"},
    {Slot::Mlp, "mlp"},
    {Slot::Combine, "combine"},
    {Slot::MtpPost, "mtp_post"},
    {Slot::PostProcess, "post_process"},
    {Slot::PipeSend, "pipe_send"},
    {Slot::PipeRecv, "pipe_recv"},
    {Slot::GradAllReduce, "grad_all_reduce"},
}};
constexpr std::array<std::pair<Phase, std::string_view>, 3> kPhases{{
    {Phase::Forward, "forward"}, {Phase::Backward, "backward"}, {Phase::Weight, "weight"}}};
constexpr std::array<std::pair<CollectiveKind, std::string_view>, 3> kKinds{{
    {CollectiveKind::AllToAll, "all_to_all"},
    {CollectiveKind::PointToPoint, "point_to_point"},
    {CollectiveKind::AllReduce, "all_reduce"},
}};

}  // namespace

std::string_view to_string(Stream s) { return name_of(kStreams, s); }
std::string_view to_string(Slot s) { return name_of(kSlots, s); }
std::string_view to_string(Phase p) { return name_of(kPhases, p); }
std::string_view to_string(CollectiveKind k) { return name_of(kKinds, k); }

std::optional<Stream> stream_from_string(std::string_view s) { return lookup(kStreams, s); }
std::optional<Slot> slot_from_string(std::string_view s) { return lookup(kSlots, s); }
std::optional<Phase> phase_from_string(std::string_view s) { return lookup(kPhases, s); }
std::optional<CollectiveKind> collective_kind_from_string(std::string_view s) {
  return lookup(kKinds, s);
}

// "F mb3 L5 dispatch", "B mb0 v1 MTP0 pre_dispatch", "W mb2 L0 mlp", "grad_all_reduce".
std::string Node::label() const {
  std::string out;
  if (microbatch >= 0) {
    out += phase == Phase::Forward ? "F" : phase == Phase::Backward ? "B" : "W";
    out += " mb" + std::to_string(microbatch);
    if (vp_stage != 0) out += " v" + std::to_string(vp_stage);
    if (layer >= 0) out += (mtp ? " MTP" : " L") + std::to_string(layer);
    out += " ";
  }
  out += to_string(slot);
  if (slot == Slot::GradAllReduce && !symbols.empty()) out += " " + symbols;
  return out;
}

}  // namespace ht::schedule
