// The twin against answers computed on paper: flow times, pipeline bubbles, overlap bounds,
// interference, ring all-reduce, and a deadlocked plan.
#include <catch2/catch.hpp>

#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
using namespace ht::sim::test;

namespace {
// SimGrid resolves times to ~1e-9 s (surf/precision) and rates to 1e-5 relative (maxmin).
constexpr double kTol = 1e-9;
}  // namespace

TEST_CASE("one all-to-all between two GPUs takes latency + bytes / bandwidth", "[sim][closed-form]") {
  PlanBuilder b(2);
  const double bytes = 3e9;
  b.uniform_a2a({0, 1}, bytes);
  auto platform = exact_platform(1, 2);
  auto r = replay(b.plan(), platform, exact_costs());
  const double expected = platform.nvlink_latency_s + bytes / platform.nvlink_bytes_per_s;
  CHECK(r.summary.step_time_s == Approx(expected).epsilon(0).margin(kTol));
  CHECK(r.summary.a2a_total_s == Approx(expected).epsilon(0).margin(kTol));
  CHECK(r.summary.a2a_exposed_s == Approx(expected).epsilon(0).margin(kTol));
  CHECK(r.summary.flows == 2);
}

TEST_CASE("a forward dispatch exchanges the counts first: two latencies, then the payload", "[sim][closed-form]") {
  PlanBuilder b(2);
  const double bytes = 3e9;
  b.uniform_a2a({0, 1}, bytes, {}, 0, ht::schedule::Slot::Dispatch);
  auto platform = exact_platform(1, 2);
  auto r = replay(b.plan(), platform, exact_costs());
  const double counts = platform.nvlink_latency_s + kDispatchCountBytes / platform.nvlink_bytes_per_s;
  const double payload = platform.nvlink_latency_s + bytes / platform.nvlink_bytes_per_s;
  CHECK(r.summary.step_time_s == Approx(counts + payload).epsilon(0).margin(kTol));
  CHECK(r.summary.flows == 4);
}

TEST_CASE("the same all-to-all across two nodes runs at the NIC rate", "[sim][closed-form]") {
  PlanBuilder b(2);
  const double bytes = 1e9;
  auto platform = exact_platform(2, 1);  // one GPU per node: every byte crosses the fabric
  b.uniform_a2a({0, 1}, bytes);
  auto r = replay(b.plan(), platform, exact_costs());
  CHECK(r.summary.step_time_s ==
        Approx(platform.nic_latency_s + bytes / platform.nic_bytes_per_s).epsilon(0).margin(kTol));
}

TEST_CASE("an NVLink-class link is not capped by TCP window models", "[sim][closed-form]") {
  // With SimGrid's default TCP-gamma (4 MiB) a 40 us route would cap a flow at
  // 4 MiB / (2 * 40 us) ~ 52 GB/s; the twin must deliver the full 450 GB/s.
  PlanBuilder b(2);
  auto platform = exact_platform(1, 2);
  platform.nvlink_latency_s = 40e-6;
  const double bytes = 45e9;
  b.uniform_a2a({0, 1}, bytes);
  auto r = replay(b.plan(), platform, exact_costs());
  const double achieved = bytes / (r.summary.step_time_s - platform.nvlink_latency_s);
  CHECK(achieved == Approx(450e9).epsilon(1e-6));
}

TEST_CASE("a uniform 1F1B pipeline without overlap shows the (PP-1)(F+B) bubble", "[sim][closed-form]") {
  const int pp = 4, m = 6;
  const double f = 1e-3, bwd = 2e-3;
  auto r = replay(one_f_one_b(pp, m, f, bwd), exact_platform(1, pp), exact_costs());
  CHECK(r.summary.step_time_s == Approx(m * (f + bwd) + (pp - 1) * (f + bwd)).epsilon(0).margin(kTol));
  CHECK(r.summary.compute_busy_s == Approx(m * (f + bwd)).epsilon(0).margin(kTol));
  CHECK(r.summary.bubble_fraction == Approx(double(pp - 1) / (m + pp - 1)).epsilon(1e-9));
}

TEST_CASE("with overlap, comm equal to compute approaches max(compute, comm) per microbatch",
          "[sim][closed-form]") {
  auto platform = exact_platform(1, 2);
  const double bytes = 0.9e9;  // 2 ms of NVLink at 450 GB/s, plus latency
  const double comm = platform.nvlink_latency_s + bytes / platform.nvlink_bytes_per_s;
  const double c = comm;  // compute equal to comm
  const int m = 16;
  auto seq = replay(toy_layer(m, c, bytes, false), platform, exact_costs());
  auto ovl = replay(toy_layer(m, c, bytes, true), platform, exact_costs());
  CHECK(seq.summary.step_time_s == Approx(m * (c + comm)).epsilon(0).margin(kTol * m));
  // Pipelined: the first compute and the last all-to-all stick out, the rest overlaps.
  CHECK(ovl.summary.step_time_s == Approx(c + (m - 1) * std::max(c, comm) + comm).epsilon(0).margin(kTol * m));
  CHECK(ovl.summary.step_time_s / m < 1.07 * std::max(c, comm));
  // Only the last all-to-all is exposed.
  CHECK(ovl.summary.a2a_exposed_s == Approx(comm).epsilon(0).margin(kTol * m));
  CHECK(ovl.summary.a2a_hidden_fraction == Approx(1.0 - 1.0 / m).epsilon(1e-6));
  CHECK(seq.summary.a2a_hidden_fraction == Approx(0.0).margin(1e-9));
}

TEST_CASE("interference slows compute by the factor while a comm of the same GPU runs", "[sim][interference]") {
  auto platform = exact_platform(1, 2);
  const double c = 1e-3;
  const double comm_s = 1e-3;  // bytes chosen so the all-to-all lasts 1 ms after latency
  const double bytes = comm_s * platform.nvlink_bytes_per_s;
  auto costs = exact_costs();
  costs.interference_factor = 1.5;
  PlanBuilder b(2);
  const int k0 = b.compute(0, c);  // independent of the all-to-all: both start at t = 0
  b.uniform_a2a({0, 1}, bytes);
  auto r = replay(b.plan(), platform, costs);
  double compute_end = -1;
  for (const auto& s : r.timeline.spans)
    if (s.args.at("node") == std::to_string(k0)) compute_end = s.end_s();
  // The flow starts after the latency; before it the GPU computes at full speed, then at 1/1.5
  // until the flow ends (latency + 1 ms), then at full speed again.
  const double lat = platform.nvlink_latency_s;
  const double flow_end = lat + comm_s;
  const double done_in_overlap = (flow_end - 0) / 1.5;  // the noise runs from rendezvous (t = 0)
  REQUIRE(done_in_overlap < c);
  CHECK(compute_end == Approx(flow_end + (c - done_in_overlap)).epsilon(0).margin(kTol));
}

TEST_CASE("an NCCL kernel holds its SMs: compute beside it runs on the SMs left", "[sim][interference]") {
  // 132 SMs, NCCL's all-to-all holds 16 for as long as its flow runs: compute beside it keeps
  // 116 of 132 and takes 132/116 of its time for that part.
  auto platform = exact_platform(1, 2);
  platform.gpu.nccl_sms = 16;
  const double c = 1e-3, comm_s = 0.5e-3;
  PlanBuilder b(2);
  const int k0 = b.compute(0, c);
  b.uniform_a2a({0, 1}, comm_s * platform.nvlink_bytes_per_s);
  auto r = replay(b.plan(), platform, exact_costs());
  double compute_end = -1;
  for (const auto& s : r.timeline.spans)
    if (s.args.at("node") == std::to_string(k0)) compute_end = s.end_s();
  const double flow_end = platform.nvlink_latency_s + comm_s;
  const double done_in_overlap = flow_end * 116.0 / 132;
  CHECK(compute_end == Approx(flow_end + (c - done_in_overlap)).epsilon(0).margin(kTol));
  // The dispatcher's own SMs (DeepEP: 20) for an EP all-to-all.
  PlanBuilder d(2);
  const int k1 = d.compute(0, c);
  d.uniform_a2a({0, 1}, comm_s * platform.nvlink_bytes_per_s);
  ht::schedule::Plan deepep = d.plan();
  deepep.ep_comm_sms = 20;
  auto r2 = replay(deepep, platform, exact_costs());
  for (const auto& s : r2.timeline.spans)
    if (s.args.at("node") == std::to_string(k1))
      CHECK(s.end_s() == Approx(flow_end + (c - flow_end * 112.0 / 132)).epsilon(0).margin(kTol));
  // And at the power-capped clock while both run (Hopper: 1575 of 1980 MHz): the SMs left at
  // 1575/1980 of the speed, then full speed once the flow is done.
  platform.gpu.overlap_clock = 1575.0 / 1980.0;
  auto r3 = replay(b.plan(), platform, exact_costs());
  for (const auto& s : r3.timeline.spans)
    if (s.args.at("node") == std::to_string(k0))
      CHECK(s.end_s() == Approx(flow_end + (c - flow_end * 116.0 / 132 * 1575.0 / 1980.0)).epsilon(0).margin(kTol));
}

TEST_CASE("interference off leaves overlapped compute untouched", "[sim][interference]") {
  auto platform = exact_platform(1, 2);
  PlanBuilder b(2);
  const int k0 = b.compute(0, 1e-3);
  b.uniform_a2a({0, 1}, 1e9);
  auto r = replay(b.plan(), platform, exact_costs());
  for (const auto& s : r.timeline.spans)
    if (s.args.at("node") == std::to_string(k0)) CHECK(s.duration_s == Approx(1e-3).epsilon(0).margin(kTol));
}

TEST_CASE("a ring all-reduce takes 2(n-1)/n * bytes / bw + latency", "[sim][closed-form]") {
  const int n = 4;
  const double bytes = 2e9;
  auto platform = exact_platform(n, 1);  // ring over NICs
  PlanBuilder b(n);
  b.all_reduce({0, 1, 2, 3}, bytes);
  auto r = replay(b.plan(), platform, exact_costs());
  CHECK(r.summary.step_time_s ==
        Approx(platform.nic_latency_s + 2.0 * (n - 1) / n * bytes / platform.nic_bytes_per_s).epsilon(0).margin(kTol));
  CHECK(r.summary.allreduce_s == Approx(r.summary.step_time_s).epsilon(1e-12));
}

TEST_CASE("pipeline p2p moves bytes once and orders the receiving stage", "[sim][closed-form]") {
  auto platform = exact_platform(2, 1);
  PlanBuilder b(2);
  const int f0 = b.compute(0, 1e-3);
  auto [s, rcv] = b.p2p(0, 1, 5e8, {f0});
  b.compute(1, 1e-3, {rcv});
  auto r = replay(b.plan(), platform, exact_costs());
  CHECK(r.summary.step_time_s ==
        Approx(2e-3 + platform.nic_latency_s + 5e8 / platform.nic_bytes_per_s).epsilon(0).margin(kTol));
  (void)s;
}

TEST_CASE("a plan whose collectives wait for each other is reported as a deadlock", "[sim][errors]") {
  // Rank 0 issues A2A x then y; rank 1 issues y then x: each waits in a different rendezvous.
  PlanBuilder b(2);
  auto x0 = b.add(0, Stream::Comm, Slot::Dispatch, Phase::Forward, 0, 0, {{1, 1e6}}, {});
  auto y1 = b.add(1, Stream::Comm, Slot::Combine, Phase::Forward, 0, 0, {{0, 1e6}}, {});
  auto y0 = b.add(0, Stream::Comm, Slot::Combine, Phase::Forward, 0, 0, {{1, 1e6}}, {});
  auto x1 = b.add(1, Stream::Comm, Slot::Dispatch, Phase::Forward, 0, 0, {{0, 1e6}}, {});
  b.collective(CollectiveKind::AllToAll, {x0, x1});
  b.collective(CollectiveKind::AllToAll, {y0, y1});
  try {
    replay(b.plan(), exact_platform(1, 2), exact_costs());
    FAIL("expected a deadlock");
  } catch (const SimError& e) {
    CHECK(e.code() == SimErrorCode::Deadlock);
    CHECK(std::string(e.what()).find("never finished") != std::string::npos);
  }
}

TEST_CASE("a malformed plan is rejected before SimGrid runs", "[sim][errors]") {
  PlanBuilder b(2);
  b.compute(0, 1e-3, {5});  // dependency on a node that does not exist
  CHECK_THROWS_AS(replay(b.plan(), exact_platform(1, 2), exact_costs()), SimError);
  PlanBuilder c(2);
  c.add(0, Stream::Comm, Slot::PipeSend, Phase::Forward, 0, 0, {{7, 1.0}}, {});
  try {
    replay(c.plan(), exact_platform(1, 2), exact_costs());
    FAIL("expected BadPlan");
  } catch (const SimError& e) {
    CHECK(e.code() == SimErrorCode::BadPlan);
    CHECK(std::string(e.what()).find("rank 7") != std::string::npos);
  }
}

TEST_CASE("a platform smaller than the plan is a BadPlatform error", "[sim][errors]") {
  auto platform = exact_platform(1, 2);
  auto plan = toy_layer(1, 1e-3, 1e6, false, 4);
  try {
    replay(plan, platform, exact_costs());
    FAIL("expected BadPlatform");
  } catch (const SimError& e) {
    CHECK(e.code() == SimErrorCode::BadPlatform);
  }
}
