// The cost model: roofline by hand, measured-table precedence, JSON parsing and its errors.
#include <catch2/catch.hpp>

#include "ht/sim/cost_model.hpp"
#include "ht/sim/error.hpp"

using namespace ht::sim;
using ht::schedule::Node;
using ht::schedule::Phase;
using ht::schedule::Slot;

namespace {
Node node(Slot slot, Phase phase, std::string symbols, double flops, double mem) {
  Node n;
  n.slot = slot;
  n.phase = phase;
  n.symbols = std::move(symbols);
  n.flops = flops;
  n.mem_bytes = mem;
  return n;
}
}  // namespace

TEST_CASE("roofline: the slower of math and memory, plus the launch overhead", "[sim][costs]") {
  GpuSpec gpu;
  gpu.peak_flops = 1e15;
  gpu.flops_efficiency = 0.5;
  gpu.hbm_bytes_per_s = 2e12;
  gpu.hbm_efficiency = 0.5;
  CostModel c;
  c.launch_overhead_s = 5e-6;
  // math 1e12 / 5e14 = 2 ms; memory 1e9 / 1e12 = 1 ms -> compute bound
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Forward, "E", 1e12, 1e9), gpu) == Approx(2e-3 + 5e-6));
  // memory 4e9 / 1e12 = 4 ms -> memory bound
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Forward, "E", 1e12, 4e9), gpu) == Approx(4e-3 + 5e-6));
  CHECK(c.compute_seconds(node(Slot::MtpPost, Phase::Forward, "", 0, 0), gpu) == 0);
}

TEST_CASE("measured durations win, most specific key first", "[sim][costs]") {
  auto c = parse_costs_json(R"({"launch_overhead_us": 2, "interference_factor": 1.2,
    "durations_us": {"mlp/backward/E": 800, "mlp/backward": 500, "mlp": 100}, "_note": "ok"})");
  CHECK(c.launch_overhead_s == Approx(2e-6));
  CHECK(c.interference_factor == Approx(1.2));
  GpuSpec gpu;
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Backward, "E", 1, 1), gpu) == Approx(800e-6));
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Backward, "-", 1, 1), gpu) == Approx(500e-6));
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Forward, "E", 1, 1), gpu) == Approx(100e-6));
  auto roof = node(Slot::PreDispatch, Phase::Forward, "*", 1e12, 0);
  CHECK(c.measured_for(roof) == nullptr);
  CHECK(c.compute_seconds(roof, gpu) == Approx(1e12 / (gpu.peak_flops * gpu.flops_efficiency) + 2e-6));
}

TEST_CASE("bad cost JSON is a BadCosts error naming the field", "[sim][costs]") {
  auto message = [](const char* text) {
    try {
      parse_costs_json(text);
    } catch (const SimError& e) {
      CHECK(e.code() == SimErrorCode::BadCosts);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message("{"), Catch::Contains("not valid JSON"));
  CHECK_THAT(message("[1]"), Catch::Contains("JSON object"));
  CHECK_THAT(message(R"({"speed": 1})"), Catch::Contains("unknown field 'speed'"));
  CHECK_THAT(message(R"({"interference_factor": 0.5})"), Catch::Contains("interference_factor"));
  CHECK_THAT(message(R"({"durations_us": {"mlp": -1}})"), Catch::Contains("mlp"));
  CHECK_THAT(message(R"({"durations_us": {"mlp": "fast"}})"), Catch::Contains("must be a number"));
  CHECK_THROWS_AS(load_costs_file("no-such-costs.json"), SimError);
}

TEST_CASE("delayed wgrad: a backward measured without W nodes prices a delayed plan's B and W by their FLOP shares",
          "[sim][costs]") {
  // The schedule's costs (costs.hpp): with delayed wgrad B = G + 2 O and W = G, without it the
  // backward is 2 G + 2 O = B + W, for G the delayable GEMMs and O the rest.
  const double g = 3e9, o = 1e9;
  auto c = parse_costs_json(R"({"durations_us": {"mlp/backward/E": 800, "pre_dispatch/weight/M": 50},
                                "flops": {"mlp/backward/E": 8e9, "pre_dispatch/weight/M": 1e9}})");
  REQUIRE(c.measured_flops.at("mlp/backward/E") == 2 * g + 2 * o);
  GpuSpec gpu;
  const double b = c.compute_seconds(node(Slot::Mlp, Phase::Backward, "E", g + 2 * o, 1), gpu);
  const double w = c.compute_seconds(node(Slot::Mlp, Phase::Weight, "E", g, 1), gpu);
  CHECK(b + w == Approx(800e-6));
  CHECK(w == Approx(800e-6 * g / (2 * g + 2 * o)));
  // The fused backward of the measured plan keeps its measured time.
  CHECK(c.compute_seconds(node(Slot::Mlp, Phase::Backward, "E", 2 * g + 2 * o, 1), gpu) == Approx(800e-6));
  // A W node with an entry of its own uses it (scaled by its FLOPs only where they differ).
  CHECK(c.compute_seconds(node(Slot::PreDispatch, Phase::Weight, "M", 1e9, 1), gpu) == Approx(50e-6));
  CHECK(c.compute_seconds(node(Slot::PreDispatch, Phase::Weight, "M", 2e9, 1), gpu) == Approx(100e-6));
  // Forward entries never scale; an entry without measured FLOPs neither.
  auto plain = parse_costs_json(R"({"durations_us": {"mlp/backward/E": 800}})");
  CHECK(plain.compute_seconds(node(Slot::Mlp, Phase::Backward, "E", g + 2 * o, 1), gpu) == Approx(800e-6));
}

TEST_CASE("activation offloading: a node takes the longer of its kernels and its share of the host-link copies",
          "[sim][costs][offload]") {
  using ht::schedule::Kernel;
  using ht::schedule::KernelKind;
  GpuSpec gpu;
  gpu.host_link_bytes_per_s = 50e9;
  gpu.slow_gpu_spread = 0;
  CostModel c;
  c.launch_overhead_s = 0;
  c.host_launch_s = 0;
  const Kernel norm{KernelKind::Elementwise, false, 0, 0, 0, 1, 0, 1e9};  // 1 GB of HBM traffic
  ht::schedule::Work plain{{norm}};
  const double alone_f = c.compute_seconds(node(Slot::PreDispatch, Phase::Forward, "*", 1, 1), gpu, &plain, false, false);
  REQUIRE(alone_f > 0);
  for (const double bytes : {1e6, 1e9, 1e11}) {
    ht::schedule::Work with{{norm, {KernelKind::HostCopy, false, 0, 0, 0, 1, 0, bytes}}};
    const double copy = bytes / 50e9;
    INFO("copy " << copy << " s beside " << alone_f << " s of kernels");
    // Forward: the D2H copy; backward: the H2D reload, the same bytes; the kernels' own time is
    // the backward's (twice the forward's for an elementwise kernel).
    CHECK(c.compute_seconds(node(Slot::PreDispatch, Phase::Forward, "*", 1, 1), gpu, &with, false, false) ==
          Approx(std::max(alone_f, copy)));
    const double alone_b = c.compute_seconds(node(Slot::PreDispatch, Phase::Backward, "*", 1, 1), gpu, &plain, false, false);
    CHECK(c.compute_seconds(node(Slot::PreDispatch, Phase::Backward, "*", 1, 1), gpu, &with, false, false) ==
          Approx(std::max(alone_b, copy)));
    // A recomputed forward copies nothing: what it rebuilds stays on the GPU.
    const double alone_r = c.compute_seconds(node(Slot::PreDispatch, Phase::Recompute, "*", 1, 1), gpu, &plain, false, false);
    CHECK(c.compute_seconds(node(Slot::PreDispatch, Phase::Recompute, "*", 1, 1), gpu, &with, false, false) ==
          Approx(alone_r));
  }
}
