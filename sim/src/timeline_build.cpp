// Summary and timeline of a finished replay (definitions of the summary fields: replay.hpp).
#include "timeline_build.hpp"

#include <algorithm>
#include <cstdio>

#include "ht/schedule/node_args.hpp"

namespace ht::sim::detail {

using schedule::Node;
using schedule::Slot;
using schedule::Stream;

namespace {

struct Interval {
  double begin = 0, end = 0;
};

bool is_a2a(const Node& n) { return n.slot == Slot::Dispatch || n.slot == Slot::Combine; }
bool is_p2p(const Node& n) { return n.slot == Slot::PipeSend || n.slot == Slot::PipeRecv; }

// Length of `a` not covered by `cover` (sorted, disjoint); `cursor` advances monotonically
// because the callers pass `a` in increasing start order.
double uncovered(const Interval& a, const std::vector<Interval>& cover, std::size_t& cursor) {
  while (cursor < cover.size() && cover[cursor].end <= a.begin) ++cursor;
  double covered = 0;
  for (std::size_t k = cursor; k < cover.size() && cover[k].begin < a.end; ++k)
    covered += std::max(0.0, std::min(a.end, cover[k].end) - std::max(a.begin, cover[k].begin));
  return (a.end - a.begin) - covered;
}

}  // namespace

Summary summarize_replay(const schedule::Plan& plan, const std::vector<double>& start,
                         const std::vector<double>& end, const std::vector<int>& stands_for, int world) {
  Summary s;
  s.gpus = world;
  for (std::size_t i = 0; i < plan.nodes.size(); ++i) s.step_time_s = std::max(s.step_time_s, end[i]);
  double busy_sum = 0, a2a_sum = 0, exposed_sum = 0, p2p_sum = 0, ar_sum = 0, tp_sum = 0, cp_sum = 0;
  double dp_sum = 0, dp_exposed_sum = 0, optimizer_sum = 0, layer_sum = 0;
  for (const auto& rp : plan.ranks) {
    // Each stream is one actor running in issue order, so its spans come out sorted and disjoint.
    std::vector<Interval> compute_stream, a2a, dp;
    double busy = 0;
    const double weight = stands_for[static_cast<std::size_t>(rp.rank)];
    // This rank's sums, added to the totals with its weight below.
    double tp_rank = 0, cp_rank = 0, p2p_rank = 0, ar_rank = 0, optimizer_rank = 0, a2a_rank = 0;
    double exposed_rank = 0, dp_rank = 0, dp_exposed_rank = 0, layer_rank = 0;
    for (int n : rp.issue) {
      const Node& node = plan.nodes[n];
      const Interval iv{start[n], end[n]};
      if (iv.end <= iv.begin) continue;
      const double length = iv.end - iv.begin;
      if (node.stream == Stream::Compute) {
        compute_stream.push_back(iv);
        if (node.part == schedule::Part::TpGather || node.part == schedule::Part::TpScatter) tp_rank += length;
        else if (node.part == schedule::Part::CpExchange) cp_rank += length;
        else busy += length;
        if (node.slot == Slot::OptimizerStep) optimizer_rank += length;
        if (node.layer >= 0 && node.part == schedule::Part::Main && node.slot != Slot::PreProcess &&
            node.slot != Slot::PostProcess && node.slot != Slot::OptimizerStep)
          layer_rank += length;
      } else if (node.stream == Stream::Dp) {
        dp.push_back(iv);
      } else if (is_a2a(node)) {
        a2a.push_back(iv);
      } else if (is_p2p(node)) {
        p2p_rank += length;
      } else if (node.slot == Slot::GradAllReduce) {
        ar_rank += length;
      }
    }
    s.max_compute_busy_s = std::max(s.max_compute_busy_s, busy);
    std::size_t cursor = 0;
    for (const auto& iv : a2a) {
      a2a_rank += iv.end - iv.begin;
      exposed_rank += uncovered(iv, compute_stream, cursor);
    }
    cursor = 0;
    for (const auto& iv : dp) {
      dp_rank += iv.end - iv.begin;
      dp_exposed_rank += uncovered(iv, compute_stream, cursor);
    }
    busy_sum += weight * busy;
    tp_sum += weight * tp_rank;
    cp_sum += weight * cp_rank;
    p2p_sum += weight * p2p_rank;
    ar_sum += weight * ar_rank;
    optimizer_sum += weight * optimizer_rank;
    layer_sum += weight * layer_rank;
    a2a_sum += weight * a2a_rank;
    exposed_sum += weight * exposed_rank;
    dp_sum += weight * dp_rank;
    dp_exposed_sum += weight * dp_exposed_rank;
  }
  const double g = std::max(1, s.gpus);
  s.compute_busy_s = busy_sum / g;
  s.a2a_total_s = a2a_sum / g;
  s.a2a_exposed_s = exposed_sum / g;
  s.p2p_total_s = p2p_sum / g;
  s.allreduce_s = ar_sum / g;
  s.tp_comm_s = tp_sum / g;
  s.cp_comm_s = cp_sum / g;
  s.dp_comm_s = dp_sum / g;
  s.dp_exposed_s = dp_exposed_sum / g;
  s.optimizer_s = optimizer_sum / g;
  s.layer_compute_s = layer_sum / g;
  // Same convention as traces::hidden_fraction: nothing to hide counts as fully hidden.
  s.a2a_hidden_fraction = s.a2a_total_s > 0 ? 1.0 - s.a2a_exposed_s / s.a2a_total_s : 1.0;
  s.bubble_fraction = s.step_time_s > 0 ? 1.0 - s.compute_busy_s / s.step_time_s : 0.0;
  return s;
}

traces::Timeline build_timeline(const schedule::Plan& plan, const std::vector<double>& start,
                                const std::vector<double>& end, const std::vector<double>& wait,
                                const std::vector<int>& original) {
  traces::Timeline t;
  t.source = "twin";
  std::vector<char> has_dp(plan.ranks.size(), 0);
  for (const Node& node : plan.nodes)
    if (node.stream == Stream::Dp) has_dp[static_cast<std::size_t>(node.rank)] = 1;
  for (const auto& rp : plan.ranks) {
    const int device = original[static_cast<std::size_t>(rp.rank)];
    t.streams.push_back({device, 0, "compute", traces::Role::Compute});
    t.streams.push_back({device, 1, "comm", traces::Role::Comm});
    if (has_dp[static_cast<std::size_t>(rp.rank)]) t.streams.push_back({device, 2, "dp", traces::Role::Comm});
  }
  for (const Node& node : plan.nodes) {
    const double duration = end[node.id] - start[node.id];
    if (!(duration > 0)) continue;  // empty slots launch nothing
    traces::Span span;
    span.name = node.label();
    span.category = std::string(schedule::to_string(node.slot));
    span.start_s = start[node.id];
    span.duration_s = duration;
    span.device = original[static_cast<std::size_t>(node.rank)];
    span.stream = static_cast<int>(node.stream);
    // A TP/CP collective on the compute stream is communication in a profile (an NCCL kernel).
    const bool compute = node.stream == Stream::Compute && node.part != schedule::Part::TpGather &&
                         node.part != schedule::Part::TpScatter && node.part != schedule::Part::CpExchange;
    span.role = compute ? traces::Role::Compute : traces::Role::Comm;
    span.args = schedule::node_args(node);
    if (node.collective >= 0 && !compute) span.args["wait_s"] = schedule::format_number(wait[node.id]);
    t.spans.push_back(std::move(span));
  }
  return t;
}

}  // namespace ht::sim::detail
