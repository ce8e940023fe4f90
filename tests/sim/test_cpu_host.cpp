// The twin's model of the CPU backend against answers computed on paper: ranks sharing a host's
// cores (host_cores), comm-stream work ahead of compute (comm_priority), the wake-up latency of a
// blocked stream, and what a calibration takes from the engine's span arguments (thread CPU time,
// expert rows, bytes sent per peer).
#include <catch2/catch.hpp>

#include "ht/sim/calibrate.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht;
using namespace ht::sim;
using namespace ht::sim::test;
using schedule::Phase;
using schedule::Slot;
using schedule::Stream;

namespace {
constexpr double kTol = 1e-9;

// The cpu-ranks preset with exact compute (1e12 flop/s, no memory bound) and a fast link.
PlatformSpec cpu_platform(int cores, bool comm_priority = true) {
  PlatformSpec p = parse_platform("cpu-ranks:nvlink_gbps=1000,nvlink_latency_us=1,host_cores=" + std::to_string(cores));
  p.comm_priority = comm_priority;
  p.gpu.peak_flops = 1e12;
  p.gpu.flops_efficiency = 1;
  p.gpu.hbm_bytes_per_s = 1e18;
  return p;
}

// One rank: compute A (1 ms), then a comm node that waits for A, then compute D waiting for it.
Plan handoff_plan() {
  PlanBuilder b(1);
  const int a = b.compute(0, 1e-3);
  const int c = b.add(0, Stream::Comm, Slot::Combine, Phase::Forward, 0, 0, {}, {a});
  b.compute(0, 1e-3, {c});
  return b.plan();
}
}  // namespace

TEST_CASE("ranks sharing one core take the sum of their compute, two cores the max", "[sim][cpu-host]") {
  PlanBuilder b(2);
  b.compute(0, 1e-3);
  b.compute(1, 1e-3);
  CHECK(replay(b.plan(), cpu_platform(1), exact_costs()).summary.step_time_s == Approx(2e-3).margin(kTol));
  CHECK(replay(b.plan(), cpu_platform(2), exact_costs()).summary.step_time_s == Approx(1e-3).margin(kTol));
}

TEST_CASE("comm-stream host work runs ahead of compute on the shared cores when comm_priority is set",
          "[sim][cpu-host]") {
  // Two ranks on two cores, each with 2 ms of compute and a combine whose received rows take
  // 1 ms to unpack. With priority the unpacking takes both cores at once (comm ends at latency +
  // 1 ms, compute is pushed to 3 ms); shared equally, four tasks on two cores run at half speed.
  PlanBuilder b(2);
  b.compute(0, 2e-3);
  b.compute(1, 2e-3);
  b.uniform_a2a({0, 1}, 1);
  CostModel costs = exact_costs();
  costs.comm_work_s["combine/forward"] = {0, 1e-3};
  const PlatformSpec first = cpu_platform(2, true), shared = cpu_platform(2, false);
  const double link = first.nvlink_latency_s + 1 / first.nvlink_bytes_per_s;
  const SimResult a = replay(b.plan(), first, costs), c = replay(b.plan(), shared, costs);
  CHECK(a.summary.step_time_s == Approx(3e-3).margin(1e-8));
  CHECK(c.summary.step_time_s == Approx(3e-3).margin(1e-8));
  // Priority is a max-min weight of 1e3 against compute's 1: two comm tasks on two cores get
  // 2e3 / (2e3 + 2) cores each, not quite all of them.
  CHECK(a.summary.a2a_total_s == Approx(link + 1e-3 * (2e3 + 2) / 2e3).margin(1e-8));
  CHECK(c.summary.a2a_total_s == Approx(link + 2e-3).margin(1e-8));
}

TEST_CASE("a stream that blocked runs again one wake-up latency later", "[sim][cpu-host]") {
  // The comm stream waits for A, then the compute stream waits for the comm node: two wake-ups.
  CostModel costs = exact_costs();
  costs.wake_latency_s = 40e-6;
  const auto r = replay(handoff_plan(), exact_platform(1, 1), costs);
  CHECK(r.summary.step_time_s == Approx(2e-3 + 2 * 40e-6).margin(kTol));
  costs.wake_latency_s = 0;
  CHECK(replay(handoff_plan(), exact_platform(1, 1), costs).summary.step_time_s == Approx(2e-3).margin(kTol));
}

TEST_CASE("the fitted wake-up latency replays the measured step time", "[sim][cpu-host][calibrate]") {
  CostModel costs = exact_costs();
  double replayed = 0;
  const double w = fit_wake_latency(handoff_plan(), exact_platform(1, 1), costs, 2e-3 + 2 * 37e-6, &replayed);
  CHECK(w == Approx(37e-6).margin(0.5e-6));
  CHECK(replayed == Approx(2e-3 + 2 * 37e-6).margin(1.5e-6));
  // A measurement faster than the twin without any hand-off cost fits 0.
  CHECK(fit_wake_latency(handoff_plan(), exact_platform(1, 1), costs, 1.5e-3) == 0);
}

TEST_CASE("a CPU-backend trace is fitted from thread CPU time onto a cpu-ranks platform", "[sim][cpu-host][calibrate]") {
  // Replay a two-rank plan, then dress its timeline as the engine's CPU backend writes it: each
  // compute span used half its duration on a core; each comm span 10 us of CPU, 4 of them before
  // its first collective.
  PlanBuilder b(2);
  const int f0 = b.compute(0, 1e-3), f1 = b.compute(1, 1e-3);
  b.uniform_a2a({0, 1}, 1e6, {{f0}, {f1}});
  SimResult r = replay(b.plan(), exact_platform(1, 2), exact_costs());
  r.timeline.metadata["host.cores"] = "2";
  r.timeline.metadata["host.comm_priority"] = "normal";
  r.timeline.metadata["link.bandwidth_gbps"] = "2";
  r.timeline.metadata["link.latency_us"] = "5";
  for (auto& s : r.timeline.spans) {
    if (s.role == traces::Role::Compute) s.args["cpu_us"] = std::to_string(s.duration_s * 0.5e6);
    if (s.role == traces::Role::Comm) {
      s.args["cpu_us"] = "10";
      s.args["pre_cpu_us"] = "4";
    }
  }
  const Calibration c = calibrate(r.timeline);
  CHECK(c.cpu_work);
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].mean_s == Approx(0.5e-3).epsilon(1e-9));
  REQUIRE(c.costs.comm_work_s.count("combine/forward") == 1);
  CHECK(c.costs.comm_work_s.at("combine/forward").before_s == Approx(4e-6).epsilon(1e-9));
  CHECK(c.costs.comm_work_s.at("combine/forward").after_s == Approx(6e-6).epsilon(1e-9));
  const PlatformSpec p = parse_platform(c.platform);
  CHECK(p.host_cores == 2);
  CHECK_FALSE(p.comm_priority);
  CHECK_FALSE(p.nvlink_ingress);
  CHECK(p.nvlink_bytes_per_s == Approx(2e9));
  // The fitted model reads back from its JSON.
  const CostModel back = parse_costs_json(calibration_to_json(c));
  REQUIRE(back.comm_work_s.size() == 1);
  CHECK(back.comm_work_s.at("combine/forward").before_s == Approx(4e-6).epsilon(1e-12));
  CHECK(back.comm_work_s.at("combine/forward").after_s == Approx(6e-6).epsilon(1e-12));
}

TEST_CASE("expert work is fitted against the rows each span processed and replayed per instance",
          "[sim][cpu-host][calibrate]") {
  // Four expert spans whose work is exactly 100 us + 2 us per row.
  PlanBuilder b(1);
  for (int mb = 0; mb < 4; ++mb) b.compute(0, 1e-4, {}, mb, Phase::Forward, Slot::Mlp);
  SimResult r = replay(b.plan(), exact_platform(1, 1), exact_costs());
  const int rows[] = {10, 30, 50, 110};
  int k = 0;
  for (auto& s : r.timeline.spans) {
    if (s.role != traces::Role::Compute) continue;
    s.args["rows"] = std::to_string(rows[k]);
    s.duration_s = 100e-6 + 2e-6 * rows[k];
    ++k;
  }
  REQUIRE(k == 4);
  const Calibration c = calibrate(r.timeline);
  REQUIRE(c.rows.size() == 1);
  CHECK(c.rows[0].scaled);
  CHECK(c.rows[0].per_row_s == Approx(2e-6).epsilon(1e-9));
  // Each node of the plan gets its own measured rows back: 100 us + 2 us x rows.
  const CostModel back = parse_costs_json(calibration_to_json(c));
  for (int i = 0; i < 4; ++i)
    CHECK(back.compute_seconds(b.plan().nodes[static_cast<std::size_t>(i)], exact_platform(1, 1).gpu) ==
          Approx(100e-6 + 2e-6 * rows[i]).epsilon(1e-9));
}

TEST_CASE("measured bytes per peer replace the plan's estimate in the replay", "[sim][cpu-host]") {
  PlanBuilder b(2);
  const auto ids = b.uniform_a2a({0, 1}, 1e6);
  const PlatformSpec p = exact_platform(1, 2);
  CostModel costs = exact_costs();
  const double planned = replay(b.plan(), p, costs).summary.step_time_s;
  CHECK(planned == Approx(p.nvlink_latency_s + 1e6 / p.nvlink_bytes_per_s).margin(kTol));
  // Rank 0 measured 3 MB to rank 1: the collective ends when that flow does.
  costs.instances[CostModel::instance_key(b.plan().nodes[static_cast<std::size_t>(ids[0])])] = {-1, true, {{1, 3e6}}};
  CHECK(replay(b.plan(), p, costs).summary.step_time_s ==
        Approx(p.nvlink_latency_s + 3e6 / p.nvlink_bytes_per_s).margin(kTol));
  // An instance that names a rank outside the plan is a BadCosts error, not a crash.
  costs.instances.begin()->second.sends = {{7, 1}};
  CHECK_THROWS_AS(replay(b.plan(), p, costs), SimError);
}

TEST_CASE("bad calibration fields are rejected naming the field", "[sim][cpu-host][calibrate]") {
  CHECK_THROWS_WITH(parse_costs_json(R"({"rows_us": {"mlp/forward/E": {"per_row_us": 1}}})"),
                    Catch::Contains("mean_rows"));
  CHECK_THROWS_WITH(parse_costs_json(R"({"instances": {"0/F mb0 L0 mlp": {"sent_bytes": {"x": 1}}}})"),
                    Catch::Contains("'x' is not a rank"));
  CHECK_THROWS_WITH(parse_costs_json(R"({"comm_work_us": {"combine/forward": {"during": 1}}})"),
                    Catch::Contains("unknown part 'during'"));
  CHECK_THROWS_WITH(parse_costs_json(R"({"wake_latency_us": -1})"), Catch::Contains("wake_latency_us"));
  CHECK_THROWS_AS(parse_platform("cpu-ranks:host_cores=-2"), SimError);
}
