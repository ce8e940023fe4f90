// Calibration: a measured timeline (the engine's `train --trace`, or any trace whose spans carry
// the plan-node arguments of schedule/node_args.hpp) -> a CostModel whose duration table holds the
// measured time of every compute node type, keyed "slot/phase/symbols" like cost_model.hpp reads
// it, plus the communication platform the measurement ran on. This closes data flow 3 of
// DESIGN.md: measure one schedule, fit, predict another schedule, compare.
//
// Fitting rules:
//  - compute: the mean work of all compute spans with the same key (over ranks, layers and
//    microbatches): the twin must reproduce busy totals, and the mean is the duration whose sum
//    over the nodes equals the measured busy time (a median underestimates right-skewed jitter).
//    Work is the span's duration, or, on the CPU backend (metadata host.cores), the thread CPU
//    time it recorded (args.cpu_us): there every rank's threads share the machine's cores, so a
//    span's duration includes the time it waited for a core, which depends on the schedule;
//    the twin re-creates that sharing on a host of host.cores cores (platform key host_cores);
//  - rows: where spans record the rows their experts processed (args.rows), the work is fitted
//    as mean + slope x (rows - mean rows) by least squares, and every span's rows are kept as a
//    measured instance, with the bytes each comm span sent to each peer (args.sent_bytes): the
//    twin replays another schedule of the same run with that routing (cost_model.hpp);
//  - links: from the trace metadata of the engine's throttle (link.bandwidth_gbps,
//    link.latency_us) as a one-node platform whose NVLink port is the throttled link (on the CPU
//    backend the cpu-ranks preset: only senders limited, host_cores from the metadata);
//  - comm overhead (comm_launch_us): on the CPU backend the mean CPU time of a dispatch/combine
//    span (the copies, the unpermute and residual add the comm stream runs), replayed as work
//    on the shared cores; otherwise what a dispatch/combine takes beyond its modelled link time,
//    the mean excess over ranks and collectives (which keeps the rendezvous wait that jitter
//    between ranks causes: the twin's ranks are balanced and would not wait).
#pragma once

#include <string>
#include <vector>

#include "ht/schedule/plan.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::sim {

struct FitRow {
  std::string key;  // "slot/phase/symbols"
  int samples = 0;
  double mean_s = 0, min_s = 0, max_s = 0;
  double per_row_s = 0, mean_rows = 0;  // when the spans record rows
  bool scaled = false;
};

struct Calibration {
  CostModel costs;
  std::vector<FitRow> rows;       // sorted by key
  std::string platform;           // --platform text for simulate
  int comm_samples = 0;           // collectives used for the comm overhead
  bool cpu_work = false;          // work from thread CPU time (CPU backend), not durations
  std::string pattern, schedule;  // from the trace metadata, when present
};

// Throws SimError(BadCosts) when the trace has no compute span with plan-node arguments.
Calibration calibrate(const traces::Timeline& measured);

// The wake-up latency (CostModel::wake_latency_s) with which the twin replays `plan` -- the plan
// the measurement ran -- in `step_s`, the measured step time: the one parameter fitted to the
// whole run rather than to single spans, since it stands for every hand-off cost the spans do
// not show (thread wake-ups, queueing for a core behind the OS's time slices). Bisection on
// [0, 5 ms] to 0.5 us; the replay time grows with the latency. Returns the latency and writes
// the replayed step time of the result to `replayed_s` when given.
double fit_wake_latency(const schedule::Plan& plan, const PlatformSpec& platform, CostModel costs, double step_s,
                        double* replayed_s = nullptr);

// The JSON form parse_costs_json reads back (durations_us, rows_us, instances,
// launch_overhead_us, comm_launch_us), with the platform and the fit table under "_" keys
// (comments to the parser).
std::string calibration_to_json(const Calibration& calibration);
// Writes calibration_to_json to `path` atomically; throws on I/O errors.
void save_calibration(const Calibration& calibration, const std::string& path);

}  // namespace ht::sim
