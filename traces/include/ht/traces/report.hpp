// The CLI's two output forms of the analytics: human tables and JSON documents. Kept in the
// library so that tests check exactly what `hybrid-twin trace` prints.
#pragma once

#include <string>

#include "ht/traces/compare.hpp"
#include "ht/traces/overlap.hpp"

namespace ht::traces {

// JSON object with devices, compute_busy_s, comm_busy_s, comm_exposed_s, hidden_fraction,
// span_s, spans, longest_exposed, kernels, categories (indent 2).
std::string summary_to_json(const OverlapSummary& summary);
std::string comparison_to_json(const Comparison& comparison);

std::string summary_table(const OverlapSummary& summary, std::size_t max_kernels = 15);
std::string comparison_table(const Comparison& comparison);

}  // namespace ht::traces
