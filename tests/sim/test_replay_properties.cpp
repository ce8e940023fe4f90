// Invariants of the replay over generated small plans: overlap never hurts without interference,
// no step beats its busiest stream, more bandwidth never slows a step, and a replay is a pure
// function of its inputs.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <map>

#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
using namespace ht::sim::test;

namespace {

// A layered toy step: per microbatch every rank computes (its own duration), then all ranks run
// an all-to-all with random per-pair bytes. `overlap` drops the edge from all-to-all i to compute
// i+1, exactly what combined 1F1B does to the real schedule.
struct ToyStep {
  int world = 2;
  int gpus_per_node = 2;
  std::vector<std::vector<double>> compute_s;                // [mb][rank]
  std::vector<std::vector<std::vector<double>>> bytes;       // [mb][from][to]
};

Plan build(const ToyStep& t, bool overlap) {
  PlanBuilder b(t.world);
  std::vector<int> ranks;
  for (int r = 0; r < t.world; ++r) ranks.push_back(r);
  std::vector<int> last(t.world, -1);
  for (std::size_t mb = 0; mb < t.compute_s.size(); ++mb) {
    std::vector<std::vector<int>> deps(t.world);
    for (int r = 0; r < t.world; ++r) {
      std::vector<int> d;
      if (!overlap && last[r] >= 0) d.push_back(last[r]);
      deps[r].push_back(b.compute(r, t.compute_s[mb][r], d, static_cast<int>(mb)));
    }
    auto ids = b.all_to_all(ranks, t.bytes[mb], deps, static_cast<int>(mb));
    for (int r = 0; r < t.world; ++r) last[r] = ids[r];
  }
  return b.plan();
}

rc::Gen<ToyStep> toy_steps() {
  return rc::gen::exec([] {
    ToyStep t;
    t.gpus_per_node = *rc::gen::inRange(1, 4);
    t.world = *rc::gen::inRange(2, 7);
    const int mbs = *rc::gen::inRange(1, 5);
    for (int mb = 0; mb < mbs; ++mb) {
      std::vector<double> c;
      std::vector<std::vector<double>> m(t.world, std::vector<double>(t.world, 0));
      for (int r = 0; r < t.world; ++r) c.push_back(*rc::gen::inRange(1, 2000) * 1e-6);
      for (int i = 0; i < t.world; ++i)
        for (int j = 0; j < t.world; ++j)
          if (i != j) m[i][j] = *rc::gen::inRange(0, 200) * 1e6;
      t.compute_s.push_back(c);
      t.bytes.push_back(m);
    }
    return t;
  });
}

PlatformSpec platform_for(const ToyStep& t) {
  return exact_platform((t.world + t.gpus_per_node - 1) / t.gpus_per_node, t.gpus_per_node);
}

// SimGrid rounds event times to ~1e-9 s; allow that per event on the critical path.
double slack(const Plan& p) { return 1e-9 * static_cast<double>(p.nodes.size() + 1); }

}  // namespace

TEST_CASE("without interference an overlapped step is never slower than the sequential one",
          "[sim][property]") {
  rc::prop("overlap <= sequential", [] {
    const ToyStep t = *toy_steps();
    const auto seq = build(t, false), ovl = build(t, true);
    const double s = replay(seq, platform_for(t), exact_costs()).summary.step_time_s;
    const double o = replay(ovl, platform_for(t), exact_costs()).summary.step_time_s;
    RC_ASSERT(o <= s + slack(seq));
  });
}

TEST_CASE("no step is shorter than the busiest stream or the busiest GPU's compute", "[sim][property]") {
  rc::prop("step >= per-stream busy time", [] {
    const ToyStep t = *toy_steps();
    const bool overlap = *rc::gen::arbitrary<bool>();
    const auto plan = build(t, overlap);
    auto r = replay(plan, platform_for(t), exact_costs());
    // Independent bound from the inputs: each GPU's compute durations add up.
    for (int rank = 0; rank < t.world; ++rank) {
      double sum = 0;
      for (const auto& mb : t.compute_s) sum += mb[rank];
      RC_ASSERT(r.summary.step_time_s + slack(plan) >= sum);
    }
    std::map<std::pair<int, int>, double> busy;
    for (const auto& s : r.timeline.spans) busy[{s.device, s.stream}] += s.duration_s;
    for (const auto& [_, b] : busy) RC_ASSERT(r.summary.step_time_s + slack(plan) >= b);
  });
}

TEST_CASE("more bandwidth never makes a step slower", "[sim][property]") {
  rc::prop("step(k * bw) <= step(bw)", [] {
    const ToyStep t = *toy_steps();
    const auto plan = build(t, *rc::gen::arbitrary<bool>());
    const double k = *rc::gen::inRange(10, 80) / 10.0;
    auto slow = platform_for(t);
    auto fast = slow;
    fast.nvlink_bytes_per_s *= k;
    fast.nic_bytes_per_s *= k;
    const double s = replay(plan, slow, exact_costs()).summary.step_time_s;
    const double f = replay(plan, fast, exact_costs()).summary.step_time_s;
    RC_ASSERT(f <= s + slack(plan));
  });
}

TEST_CASE("the same input gives the same timeline and summary, bit for bit", "[sim][property]") {
  rc::prop("replay is deterministic", [] {
    const ToyStep t = *toy_steps();
    const auto plan = build(t, *rc::gen::arbitrary<bool>());
    auto costs = exact_costs();
    costs.interference_factor = *rc::gen::element(1.0, 1.3);
    auto a = replay(plan, platform_for(t), costs);
    auto b = replay(plan, platform_for(t), costs);
    RC_ASSERT(a.summary == b.summary);
    RC_ASSERT(a.timeline.spans.size() == b.timeline.spans.size());
    for (std::size_t i = 0; i < a.timeline.spans.size(); ++i) {
      const auto &x = a.timeline.spans[i], &y = b.timeline.spans[i];
      RC_ASSERT(x.name == y.name);
      RC_ASSERT(x.start_s == y.start_s);
      RC_ASSERT(x.duration_s == y.duration_s);
      RC_ASSERT(x.args == y.args);
    }
  });
}
