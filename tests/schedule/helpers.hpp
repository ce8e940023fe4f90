// Shared helpers of the schedule tests: build a plan from pattern text, list node labels.
#pragma once

#include <string>
#include <vector>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule::test {

inline ParallelConfig parallel(int ep, int dp, int microbatches, int pp = 1, int vpp = 0) {
  ParallelConfig c;
  c.ep = ep;
  c.dp = dp;
  c.microbatches = microbatches;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

inline ScheduleOptions options(bool overlap, bool delay_wgrad, bool early = false) {
  ScheduleOptions o;
  o.overlap = overlap;
  o.delay_wgrad = delay_wgrad;
  o.early_attn_release = early;
  return o;
}

inline Plan make_plan(const std::string& pattern, const ParallelConfig& config,
                      const ScheduleOptions& opts, const ModelDims& dims = tiny_model()) {
  return build_plan(patterns::parse(pattern), dims, config, opts);
}

inline std::vector<std::string> labels(const Plan& plan, int rank) {
  std::vector<std::string> out;
  for (int id : plan.ranks.at(static_cast<std::size_t>(rank)).issue) out.push_back(plan.node(id).label());
  return out;
}

}  // namespace ht::schedule::test
