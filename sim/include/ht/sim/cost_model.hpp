// How long a compute node of the plan runs on one GPU when nothing else disturbs it. The replay
// asks this for every compute node; communication time is not here (SimGrid's flow model makes
// it). Two sources, in this order of preference:
//   1. a measured-duration table (from --costs JSON, later fitted by calibration), keyed by
//      "slot/phase/symbols", "slot/phase" or "slot" (first match wins), e.g. "mlp/backward/E";
//   2. an analytic roofline: max(flops / (peak * eff), mem_bytes / (hbm * eff)) + launch overhead.
//
// JSON form (every field optional):
//   { "launch_overhead_us": 4, "comm_launch_us": 0, "interference_factor": 1.15,
//     "durations_us": { "mlp/backward/E": 850.5, "pre_dispatch/forward": 310, "post_process": 90 } }
// Slot and phase names are schedule::to_string(Slot) / to_string(Phase).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ht/schedule/plan.hpp"
#include "ht/sim/platform.hpp"

namespace ht::sim {

struct CostModel {
  double launch_overhead_s = 4e-6;  // per compute node (kernel launches of one slot)
  double comm_launch_s = 0;         // added to every non-empty communication node
  // Slowdown of compute while a communication of the same GPU is in flight (SM and HBM sharing
  // with NCCL kernels; simulators.md 1.3). 1 = off. Compute runs at 1/factor of its speed then.
  double interference_factor = 1.0;
  std::map<std::string, double, std::less<>> measured_s;  // key -> seconds (table above)
  bool operator==(const CostModel&) const = default;

  // Seconds of a compute node on `gpu` (table first, else roofline).
  double compute_seconds(const schedule::Node& node, const GpuSpec& gpu) const;
  // The table entry used for `node`, or nullptr when the roofline applies.
  const double* measured_for(const schedule::Node& node) const;
};

// Parses the JSON form; throws SimError(BadCosts) with the offending field.
CostModel parse_costs_json(std::string_view json_text, CostModel base = {});
CostModel load_costs_file(const std::string& path, CostModel base = {});
// Applies "key=value" (launch_overhead_us, comm_launch_us, interference_factor).
void set_cost_key(CostModel& model, std::string_view key, std::string_view value);

}  // namespace ht::sim
