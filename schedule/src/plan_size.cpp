// Plan size estimate and its limits (see plan_size.hpp). Counted in double: the products of
// hostile settings overflow any integer type.
#include "ht/schedule/plan_size.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

// Five slots (pre_dispatch, dispatch, mlp, combine, mtp_post) in three phases (F, B, W).
constexpr double kNodesPerLayer = 15;
// Embedding, loss, pipeline send/receive, gradient all-reduces per rank and microbatch.
constexpr double kNodesPerMicrobatch = 8;
// Dispatch and combine, forward and backward.
constexpr double kAllToAllsPerMoeLayer = 4;

std::string count(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v < 1e7 ? "%.0f" : "%.3g", v);
  return text;
}

}  // namespace

PlanSize estimate_plan_size(const patterns::ParsedPattern& pattern, const ParallelConfig& config, double built) {
  const double ranks =
      built > 0 ? built : double(config.tp) * double(config.cp) * double(config.dp) * double(config.pp);
  const double microbatches = config.microbatches;
  double layers = pattern.logical_count() + pattern.mtp_depths;
  double moe = pattern.mtp_depths > 0 && pattern.mtp.find('E') != std::string::npos ? pattern.mtp_depths : 0;
  for (const auto& item : pattern.items())
    if (item.symbols.find('E') != std::string::npos) moe += 1;
  // Each rank holds its stage's share of the layers (rounded up: stages may be uneven).
  const double per_rank_layers = std::ceil(layers / config.pp);
  const double per_rank_moe = std::ceil(moe / config.pp);
  PlanSize s;
  s.nodes = ranks * microbatches * (per_rank_layers * kNodesPerLayer + kNodesPerMicrobatch);
  s.transfers = ranks * microbatches * per_rank_moe * kAllToAllsPerMoeLayer * double(config.ep - 1);
  return s;
}

void check_plan_size(const patterns::ParsedPattern& pattern, const ParallelConfig& config, double built) {
  const double ranks = double(config.tp) * double(config.cp) * double(config.dp) * double(config.pp);
  if (ranks > double(kMaxPlanRanks))
    throw ScheduleError(ErrorCode::BadConfig,
                        "tp x cp x dp x pp = " + count(ranks) + " ranks is more than the limit of " +
                            count(double(kMaxPlanRanks)) + " ranks of one plan");
  const PlanSize s = estimate_plan_size(pattern, config, built);
  const std::string knobs = " (ranks tp x cp x dp x pp = " + count(ranks) + ", microbatches " +
                            std::to_string(config.microbatches) + ", " + std::to_string(pattern.logical_count()) +
                            " layers, ep " + std::to_string(config.ep) + ")";
  if (s.nodes > kMaxPlanNodes)
    throw ScheduleError(ErrorCode::BadConfig, "the plan would hold about " + count(s.nodes) +
                                                  " nodes, more than the limit of " + count(kMaxPlanNodes) + knobs +
                                                  "; reduce dp, pp, microbatches or the layer count");
  if (s.transfers > kMaxPlanTransfers)
    throw ScheduleError(ErrorCode::BadConfig, "the plan's all-to-alls would hold about " + count(s.transfers) +
                                                  " peer transfers, more than the limit of " +
                                                  count(kMaxPlanTransfers) + knobs + "; reduce ep, dp or microbatches");
}

}  // namespace ht::schedule
