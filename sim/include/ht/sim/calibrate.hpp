// Calibration: a measured timeline (the engine's `train --trace`, or any trace whose spans carry
// the plan-node arguments of schedule/node_args.hpp) -> a CostModel whose duration table holds the
// measured time of every compute node type, keyed "slot/phase/symbols" like cost_model.hpp reads
// it, plus the communication platform the measurement ran on. This closes data flow 3 of
// DESIGN.md: measure one schedule, fit, predict another schedule, compare.
//
// Fitting rules:
//  - compute: the mean duration of all compute spans with the same key (over ranks, layers and
//    microbatches): the twin must reproduce busy totals, and the mean is the duration whose sum
//    over the nodes equals the measured busy time (a median underestimates right-skewed jitter);
//  - links: from the trace metadata of the engine's throttle (link.bandwidth_gbps,
//    link.latency_us) as a one-node platform whose NVLink port is the throttled link;
//  - comm overhead: what a dispatch/combine takes beyond its modelled link time (the host-side
//    copies, the unpermute and residual add that the engine runs on the comm stream), as
//    comm_launch_us: the mean excess over ranks and collectives. The mean over ranks keeps the
//    rendezvous wait that run-to-run jitter between ranks causes (a sequential step pays the
//    slower rank at every all-to-all); the twin's ranks are balanced and would not wait.
#pragma once

#include <string>
#include <vector>

#include "ht/sim/cost_model.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::sim {

struct FitRow {
  std::string key;  // "slot/phase/symbols"
  int samples = 0;
  double mean_s = 0, min_s = 0, max_s = 0;
};

struct Calibration {
  CostModel costs;
  std::vector<FitRow> rows;       // sorted by key
  std::string platform;           // --platform text for simulate
  int comm_samples = 0;           // collectives used for the comm overhead
  std::string pattern, schedule;  // from the trace metadata, when present
};

// Throws SimError(BadCosts) when the trace has no compute span with plan-node arguments.
Calibration calibrate(const traces::Timeline& measured);

// The JSON form parse_costs_json reads back (durations_us, launch_overhead_us, comm_launch_us),
// with the platform and the fit table under "_" keys (comments to the parser).
std::string calibration_to_json(const Calibration& calibration);
// Writes calibration_to_json to `path` atomically; throws on I/O errors.
void save_calibration(const Calibration& calibration, const std::string& path);

}  // namespace ht::sim
