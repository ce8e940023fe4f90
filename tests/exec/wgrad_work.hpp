// Where the weight-gradient GEMMs of a measured step ran, read from the timeline: both executors
// write on every span the GEMM work its node did ("gemm_flops", a counter of 2 m n k, not a
// clock) and on the experts' spans the rows they processed ("rows"). The oracle is the twin's
// price of each W node (schedule/costs.hpp, in the plan's node flops), and the same step run
// without delayed wgrad. Shared by the CPU executor's and the device executor's tests.
#pragma once

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>

#include "ht/schedule/costs.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::test {

inline double span_number(const traces::Span& s, const std::string& key) {
  const auto it = s.args.find(key);
  REQUIRE(it != s.args.end());
  return std::stod(it->second);
}

// Measured GEMM FLOPs per plan node id (summed, should a node run more than once); step-level
// spans (the gradient all-reduce) carry none.
inline std::map<int, double> gemm_flops_by_node(const traces::Timeline& t) {
  std::map<int, double> out;
  for (const auto& s : t.spans)
    if (s.args.count("gemm_flops")) out[static_cast<int>(span_number(s, "node"))] += span_number(s, "gemm_flops");
  return out;
}

// Totals of one step's backward work: every B node's and every W node's GEMM FLOPs.
struct BackwardWork {
  double backward = 0, weight = 0;
};

// Checks the run `on` of `on_plan` (delayed wgrad) against the same step `off` of `off_plan`:
//  - every W node did GEMM work, and exactly what the twin prices it at: the plan's node flops
//    (pre_dispatch: the pre-layers', the shared expert's and eh_proj's weight GEMMs; a dense
//    '-': fc1 and fc2), or for a MoE mlp slot the closed form of the experts' weight GEMMs with
//    the rows they measured (the plan assumes balanced routing);
//  - per (rank, microbatch, layer) the backward work with delayed wgrad plus the W work equals
//    the backward work without it: the GEMMs moved, none was added or lost.
// Returns the totals of the delayed run.
inline BackwardWork check_weight_work(const schedule::Plan& on_plan, const traces::Timeline& on,
                                      const schedule::Plan& off_plan, const traces::Timeline& off,
                                      const schedule::ModelDims& dims, int local_experts) {
  const auto flops_on = gemm_flops_by_node(on), flops_off = gemm_flops_by_node(off);
  std::map<int, double> rows_of_node;  // node id -> the rows its experts processed
  for (const auto& s : on.spans)
    if (s.args.count("rows")) rows_of_node[static_cast<int>(span_number(s, "node"))] = span_number(s, "rows");
  using Key = std::tuple<int, int, bool, int>;  // rank, microbatch, mtp, layer
  std::map<Key, double> on_sum, off_sum;
  BackwardWork total;
  int w_nodes = 0;
  for (const auto& n : on_plan.nodes) {
    if (n.microbatch < 0 || n.phase == schedule::Phase::Forward) continue;
    const auto it = flops_on.find(n.id);
    REQUIRE(it != flops_on.end());
    on_sum[{n.rank, n.microbatch, n.mtp, n.layer}] += it->second;
    if (n.phase == schedule::Phase::Backward) {
      total.backward += it->second;
      continue;
    }
    ++w_nodes;
    total.weight += it->second;
    INFO("W node " << n.label() << " of rank " << n.rank << ": measured " << it->second << " GEMM flops");
    CHECK(it->second > 0);
    if (n.slot == schedule::Slot::Mlp && n.symbols == "E") {
      // The rows this rank's experts processed, recorded on the same layer's mlp forward span.
      double expert_rows = -1;
      for (const auto& f : on_plan.nodes)
        if (f.rank == n.rank && f.microbatch == n.microbatch && f.layer == n.layer && f.mtp == n.mtp &&
            f.slot == schedule::Slot::Mlp && f.phase == schedule::Phase::Forward)
          expert_rows = rows_of_node.at(f.id);
      REQUIRE(expert_rows >= 0);
      CHECK(it->second == schedule::expert_work(dims, expert_rows, local_experts).weight_gemm_flops);
    } else {
      CHECK(it->second == n.flops);
    }
  }
  CHECK(w_nodes > 0);
  for (const auto& n : off_plan.nodes) {
    if (n.microbatch < 0 || n.phase == schedule::Phase::Forward) continue;
    REQUIRE(n.phase == schedule::Phase::Backward);  // no W nodes without delayed wgrad
    off_sum[{n.rank, n.microbatch, n.mtp, n.layer}] += flops_off.at(n.id);
  }
  CHECK(on_sum == off_sum);
  return total;
}

}  // namespace ht::test
