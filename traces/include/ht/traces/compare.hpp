// Predicted vs measured (or run A vs run B): the headline figures of two timelines side by side
// with relative errors, the check that closes data flow 3 of DESIGN.md (calibrate, predict,
// compare).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ht/traces/overlap.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::traces {

struct ComparisonRow {
  std::string metric;  // "step_time_s", ..., "category dispatch busy_s", ...
  double predicted = 0;
  double measured = 0;
  // (predicted - measured) / |measured|; 0 when both are 0, nullopt when only measured is 0.
  std::optional<double> relative_error;
};

struct Comparison {
  std::vector<ComparisonRow> rows;
  OverlapSummary predicted;
  OverlapSummary measured;
};

std::optional<double> relative_error(double predicted, double measured);

// Rows: step_time_s (span), compute_busy_s, comm_busy_s, comm_exposed_s, hidden_fraction, then
// for every category of either side (sorted) "category C busy_s" and, when C is comm on either
// side, "category C exposed_s".
Comparison compare(const Timeline& predicted, const Timeline& measured);

}  // namespace ht::traces
