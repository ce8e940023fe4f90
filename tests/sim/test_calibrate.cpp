// Calibration against a known answer: replay a real plan with a duration table and a comm launch
// cost chosen here, calibrate the twin's own timeline, and expect the same table back; then the
// fitted model must predict the same step time, and the overlapped schedule the same as the
// original model predicts it.
#include <catch2/catch.hpp>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/sim/calibrate.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"

using namespace ht;

namespace {

schedule::Plan small_plan(bool overlap, bool delay_wgrad = false) {
  schedule::ModelDims d = schedule::tiny_model();
  schedule::ParallelConfig pc;
  pc.ep = 2;
  pc.dp = 2;
  pc.microbatches = 4;
  schedule::ScheduleOptions so;
  so.overlap = overlap;
  so.delay_wgrad = delay_wgrad;
  return schedule::build_plan(patterns::parse("M[*E]M[*E]"), d, pc, so);
}

sim::CostModel known_costs() {
  sim::CostModel c;
  c.launch_overhead_s = 0;
  c.comm_launch_s = 30e-6;
  c.measured_s = {{"pre_dispatch/forward/*E", 400e-6}, {"pre_dispatch/backward/*E", 800e-6},
                  {"mlp/forward/E", 300e-6},            {"mlp/backward/E", 600e-6},
                  {"pre_process/forward", 50e-6},       {"pre_process/backward", 60e-6},
                  {"post_process/forward", 120e-6},     {"post_process/backward", 140e-6},
                  {"pre_dispatch/forward/M", 250e-6},   {"pre_dispatch/backward/M", 500e-6}};
  return c;
}

}  // namespace

TEST_CASE("calibrating the twin's own timeline returns the durations it was given", "[sim][calibrate]") {
  const sim::CostModel truth = known_costs();
  const sim::PlatformSpec platform = sim::parse_platform("dgx-h100:nvlink_gbps=0.5,nvlink_efficiency=1,nvlink_latency_us=5");
  const schedule::Plan seq = small_plan(false);
  sim::SimResult r = sim::replay(seq, platform, truth);
  r.timeline.metadata["link.bandwidth_gbps"] = "0.5";
  r.timeline.metadata["link.latency_us"] = "5";
  const sim::Calibration c = sim::calibrate(r.timeline);
  for (const auto& row : c.rows) {
    INFO(row.key);
    const auto it = truth.measured_s.find(row.key);
    REQUIRE(it != truth.measured_s.end());
    CHECK(row.mean_s == Approx(it->second).epsilon(1e-9));
    CHECK(row.min_s == Approx(row.max_s).epsilon(1e-9));
  }
  // The comm overhead comes back within SimGrid's time resolution plus the flow-sharing effects
  // of two concurrent messages (one peer each here: none).
  CHECK(c.costs.comm_launch_s == Approx(truth.comm_launch_s).margin(2e-6));
  CHECK(c.comm_samples > 0);

  // The fitted model on the platform it names predicts the overlapped schedule as the truth does.
  const sim::PlatformSpec fitted_platform = sim::parse_platform(c.platform);
  const schedule::Plan ovl = small_plan(true);
  const double predicted = sim::replay(ovl, fitted_platform, c.costs).summary.step_time_s;
  const double reference = sim::replay(ovl, platform, truth).summary.step_time_s;
  CHECK(predicted == Approx(reference).epsilon(0.01));
}

TEST_CASE("the calibration JSON reads back as the same cost model", "[sim][calibrate]") {
  const schedule::Plan seq = small_plan(false);
  sim::SimResult r = sim::replay(seq, sim::preset("dgx-h100"), known_costs());
  const sim::Calibration c = sim::calibrate(r.timeline);
  const sim::CostModel back = sim::parse_costs_json(sim::calibration_to_json(c));
  REQUIRE(back.measured_s.size() == c.costs.measured_s.size());
  for (const auto& [key, v] : c.costs.measured_s) CHECK(back.measured_s.at(key) == Approx(v).epsilon(1e-12));
  CHECK(back.comm_launch_s == Approx(c.costs.comm_launch_s).epsilon(1e-12).margin(1e-15));
  CHECK(back.launch_overhead_s == 0);
}

TEST_CASE("a calibration without W nodes prices a delayed-wgrad plan's B and W as shares of the measured backward",
          "[sim][calibrate]") {
  const sim::PlatformSpec platform = sim::parse_platform("dgx-h100:nvlink_gbps=0.5,nvlink_efficiency=1");
  const sim::Calibration c = sim::calibrate(sim::replay(small_plan(false), platform, known_costs()).timeline);
  CHECK(c.costs.measured_flops.count("mlp/backward/E") == 1);
  CHECK(c.costs.measured_flops.count("mlp/forward/E") == 0);  // forward entries never scale
  // Per rank, the compute of the delayed plan (B + W) is that of the same plan without delayed
  // wgrad (the measured backwards), and its W nodes carry a share of it.
  const auto busy = [&](const schedule::Plan& plan, schedule::Phase only, bool all) {
    double s = 0;
    for (const auto& n : plan.nodes)
      if (n.stream == schedule::Stream::Compute && n.rank == 0 && (all || n.phase == only))
        s += c.costs.compute_seconds(n, platform.gpu);
    return s;
  };
  const schedule::Plan delayed = small_plan(true, true), fused = small_plan(true, false);
  CHECK(busy(delayed, schedule::Phase::Forward, true) == Approx(busy(fused, schedule::Phase::Forward, true)).epsilon(1e-12));
  const double w = busy(delayed, schedule::Phase::Weight, false);
  CHECK(w > 0.2 * busy(fused, schedule::Phase::Backward, false));
}

TEST_CASE("a trace without plan-node spans is rejected with a clear error", "[sim][calibrate]") {
  traces::Timeline t;
  traces::Span s;
  s.name = "volta_sgemm_128x64_nn";
  s.category = "kernel";
  s.duration_s = 1e-3;
  t.spans.push_back(s);
  CHECK_THROWS_WITH(sim::calibrate(t), Catch::Contains("no compute span with plan-node arguments"));
  t.metadata["link.bandwidth_gbps"] = "fast";
  t.spans[0].args["phase"] = "forward";
  CHECK_THROWS_WITH(sim::calibrate(t), Catch::Contains("link.bandwidth_gbps"));
}
