// Names of the plan enums and node labels (see plan.hpp).
#include "ht/schedule/plan.hpp"

#include <array>
#include <utility>

#include "enum_names.hpp"

namespace ht::schedule {
namespace {

using detail::lookup;
using detail::name_of;

constexpr std::array<std::pair<Stream, std::string_view>, 3> kStreams{{
    {Stream::Compute, "compute"}, {Stream::Comm, "comm"}, {Stream::Dp, "dp"}}};
constexpr std::array<std::pair<Slot, std::string_view>, 12> kSlots{{
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
    {Slot::ParamGather, "param_gather"},
    {Slot::OptimizerStep, "optimizer_step"},
}};
constexpr std::array<std::pair<Phase, std::string_view>, 4> kPhases{{
    {Phase::Forward, "forward"}, {Phase::Backward, "backward"}, {Phase::Weight, "weight"},
    {Phase::Recompute, "recompute"}}};
constexpr std::array<std::pair<CollectiveKind, std::string_view>, 5> kKinds{{
    {CollectiveKind::AllToAll, "all_to_all"},
    {CollectiveKind::PointToPoint, "point_to_point"},
    {CollectiveKind::AllReduce, "all_reduce"},
    {CollectiveKind::AllGather, "all_gather"},
    {CollectiveKind::ReduceScatter, "reduce_scatter"},
}};
constexpr std::array<std::pair<Part, std::string_view>, 6> kParts{{
    {Part::Main, "main"},
    {Part::TpGather, "tp_gather"},
    {Part::TpScatter, "tp_scatter"},
    {Part::CpExchange, "cp_exchange"},
    {Part::EtpGather, "etp_gather"},
    {Part::EtpScatter, "etp_scatter"},
}};
constexpr std::array<std::pair<KernelKind, std::string_view>, 8> kKernelKinds{{
    {KernelKind::Gemm, "gemm"},
    {KernelKind::GroupedGemm, "grouped_gemm"},
    {KernelKind::Attention, "attention"},
    {KernelKind::Scan, "scan"},
    {KernelKind::DeltaRule, "delta_rule"},
    {KernelKind::Elementwise, "elementwise"},
    {KernelKind::Permute, "permute"},
    {KernelKind::HostCopy, "host_copy"},
}};

}  // namespace

std::string_view to_string(Stream s) { return name_of(kStreams, s); }
std::string_view to_string(Slot s) { return name_of(kSlots, s); }
std::string_view to_string(Phase p) { return name_of(kPhases, p); }
std::string_view to_string(CollectiveKind k) { return name_of(kKinds, k); }
std::string_view to_string(Part p) { return name_of(kParts, p); }
std::string_view to_string(KernelKind k) { return name_of(kKernelKinds, k); }
std::optional<Part> part_from_string(std::string_view s) { return lookup(kParts, s); }
std::optional<KernelKind> kernel_kind_from_string(std::string_view s) { return lookup(kKernelKinds, s); }

std::optional<Stream> stream_from_string(std::string_view s) { return lookup(kStreams, s); }
std::optional<Slot> slot_from_string(std::string_view s) { return lookup(kSlots, s); }
std::optional<Phase> phase_from_string(std::string_view s) { return lookup(kPhases, s); }
std::optional<CollectiveKind> collective_kind_from_string(std::string_view s) {
  return lookup(kKinds, s);
}

// "F mb3 L5 dispatch", "B mb0 v1 MTP0 pre_dispatch", "W mb2 L0 mlp", "grad_all_reduce",
// "R mb1 L2 pre_dispatch * tp_gather", "grad_all_reduce expert v1 bucket 0".
std::string Node::label() const {
  std::string out;
  if (microbatch >= 0) {
    out += phase == Phase::Forward    ? "F"
           : phase == Phase::Backward ? "B"
           : phase == Phase::Weight   ? "W"
                                      : "R";
    out += " mb" + std::to_string(microbatch);
    if (vp_stage != 0) out += " v" + std::to_string(vp_stage);
    if (layer >= 0) out += (mtp ? " MTP" : " L") + std::to_string(layer);
    out += " ";
  }
  out += to_string(slot);
  if ((slot == Slot::GradAllReduce || slot == Slot::ParamGather) && !symbols.empty()) {
    out += " " + symbols;
    if (layer >= 0) out += " v" + std::to_string(vp_stage) + " bucket " + std::to_string(layer);
  }
  if (part != Part::Main) out += " " + symbols + " " + std::string(to_string(part));
  return out;
}

}  // namespace ht::schedule
