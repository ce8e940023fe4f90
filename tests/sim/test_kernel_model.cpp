// The physical kernel model and the production layouts in the replay, against closed forms
// written here: GEMM tiles and waves, the memory floor of skinny GEMMs, which kernels each phase
// runs, flash-attention efficiency; TP collectives on NVLink inside a node, the CP ring
// overlapped with its attention core, the DDP reduce-scatter hidden behind the backward.
#include <catch2/catch.hpp>

#include <cmath>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
using ht::schedule::Kernel;
using ht::schedule::KernelKind;
using ht::schedule::Phase;

TEST_CASE("a large GEMM runs in whole waves of full tiles at the tile efficiency", "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  const double n = 8192;
  // 128 x 256 tiles: 64 x 32 = 2048 tiles, 16 waves of 132 SMs; each tile 2 x 128 x 256 x (K + 384)
  // FLOPs at 0.85 of a 132nd of 989 TFLOP/s.
  const double per_sm = 989e12 / 132 * 0.85;
  const double expected = 16 * 2 * 128.0 * 256 * (n + 384) / per_sm;
  CHECK(gemm_seconds(n, n, n, 1, 3 * n * n * 2, h100) == Approx(expected).epsilon(1e-12));
  const double achieved = 2 * n * n * n / expected / 989e12;
  CHECK(achieved == Approx(0.78).margin(0.01));  // cuBLAS measures ~0.78-0.80 at this size
}

TEST_CASE("wave quantisation: a few rows more cost a part-empty wave", "[sim][kernels]") {
  GpuSpec g = preset("dgx-h100").gpu;
  g.sms = 4;
  g.gemm_tile_overhead_k = 0;
  // 256 x 512 is 4 tiles of 128 x 256: one wave on 4 SMs.
  const double one = gemm_seconds(256, 512, 1024, 1, 0, g);
  CHECK(one == Approx(2 * 128.0 * 256 * 1024 / (g.peak_flops / 4 * g.gemm_efficiency)));
  // 384 x 512: 6 tiles of 128 x 256 need 2 waves; the best tile, 128 x 128, makes 12 tiles in 3
  // waves of half the work each: 1.5x the time for 1.5x the rows here, but 2x at 257 rows.
  CHECK(gemm_seconds(384, 512, 1024, 1, 0, g) == Approx(1.5 * one));
  CHECK(gemm_seconds(257, 512, 1024, 1, 0, g) == Approx(1.5 * one));
  // 64 rows: one-warpgroup 64 x 128 tiles, 4 of them fill the 4 SMs with a quarter of the work.
  CHECK(gemm_seconds(64, 512, 1024, 1, 0, g) == Approx(0.25 * one));
}

TEST_CASE("a skinny GEMM streams its weights at HBM speed", "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  const double m = 64, n = 7168, k = 16384, bytes = (m * k + k * n + m * n) * 2;
  CHECK(gemm_seconds(m, n, k, 1, bytes, h100) == Approx(bytes / (3.35e12 * 0.8)));
}

TEST_CASE("each phase runs its kernels: dgrad + wgrad in B, wgrad alone in W under delayed wgrad",
          "[sim][kernels]") {
  const GpuSpec g = preset("dgx-h200").gpu;
  const Kernel gemm{KernelKind::Gemm, true, 4096, 2048, 1024, 1, 2 * 4096.0 * 2048 * 1024, 0};
  const double fwd = gemm_seconds(4096, 2048, 1024, 1, 0, g);
  const double dgrad = gemm_seconds(4096, 1024, 2048, 1, 0, g);
  const double wgrad = gemm_seconds(1024, 2048, 4096, 1, 0, g);
  CHECK(kernel_seconds(gemm, Phase::Forward, false, g) == Approx(fwd));
  CHECK(kernel_seconds(gemm, Phase::Recompute, false, g) == Approx(fwd));
  CHECK(kernel_seconds(gemm, Phase::Backward, false, g) == Approx(dgrad + wgrad));
  CHECK(kernel_seconds(gemm, Phase::Backward, true, g) == Approx(dgrad));
  CHECK(kernel_seconds(gemm, Phase::Weight, true, g) == Approx(wgrad));
  Kernel router = gemm;
  router.delayable = false;
  CHECK(kernel_seconds(router, Phase::Backward, true, g) == Approx(dgrad + wgrad));
  CHECK(kernel_seconds(router, Phase::Weight, true, g) == 0);
  const Kernel norm{KernelKind::Elementwise, false, 0, 0, 0, 1, 0, 1e9};
  CHECK(kernel_seconds(norm, Phase::Forward, false, g) == Approx(1e9 / (4.8e12 * 0.8)));
  CHECK(kernel_seconds(norm, Phase::Backward, false, g) == Approx(2e9 / (4.8e12 * 0.8)));
}

TEST_CASE("flash attention follows FlashAttention-3's measured efficiency by sequence and head size",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  CHECK(attention_efficiency(4096, 128, false, h100) == Approx(0.59));
  CHECK(attention_efficiency(512, 128, false, h100) == Approx(0.30));
  CHECK(attention_efficiency(3 * 1024, 128, false, h100) == Approx(0.53 + (0.59 - 0.53) * std::log2(1.5)));
  CHECK(attention_efficiency(4096, 64, false, h100) == Approx(0.59 * 0.77));
  CHECK(attention_efficiency(8192, 128, true, h100) == Approx(0.565 * 0.61 / 0.65));
  // Causal attention over s tokens: keys = s / 2 on average; 4 N keys H d FLOPs at that efficiency.
  const double tokens = 4096, keys = 2048, flops = 4 * tokens * keys * 32 * 128;
  const Kernel core{KernelKind::Attention, false, tokens, keys, 128, 1, flops, 0};
  CHECK(kernel_seconds(core, Phase::Forward, false, h100) == Approx(flops / (989e12 * 0.59)));
  CHECK(kernel_seconds(core, Phase::Backward, false, h100) ==
        Approx(2.5 * flops / (989e12 * 0.55 * 0.59 / 0.645)));
}

TEST_CASE("a TP all-gather inside one node takes latency + bytes / NVLink on the compute stream",
          "[sim][kernels]") {
  using namespace ht::schedule;
  ModelDims d = tiny_model();
  ParallelConfig c;
  c.tp = 2;
  const Plan plan = build_plan(ht::patterns::parse("-"), d, c, {});
  auto platform = test::exact_platform(1, 2);
  auto r = replay(plan, platform, test::exact_costs());
  const double bytes = d.tokens() / 2 * d.hidden * d.bytes_per_element;
  const double flow = platform.nvlink_latency_s + bytes / platform.nvlink_bytes_per_s;
  int gathers = 0;
  for (const auto& span : r.timeline.spans)
    if (span.args.count("part") && span.args.at("part") == "tp_gather" && span.device == 0) {
      CHECK(span.stream == 0);
      if (span.args.at("phase") == "forward") CHECK(span.duration_s == Approx(flow).epsilon(1e-6));
      ++gathers;
    }
  CHECK(gathers >= 2);
  CHECK(r.summary.tp_comm_s > 0);
  // The TP collectives are time the compute stream spends not computing.
  CHECK(r.summary.compute_busy_s + r.summary.tp_comm_s <= r.summary.step_time_s * (1 + 1e-9));
}

TEST_CASE("the CP ring runs beside its attention core: the node takes the longer of the two",
          "[sim][kernels]") {
  using namespace ht::schedule;
  ModelDims d = tiny_model();
  ParallelConfig c;
  c.cp = 2;
  const Plan plan = build_plan(ht::patterns::parse("*"), d, c, {});
  auto platform = test::exact_platform(1, 2);
  const CostModel costs = test::exact_costs();
  for (double gbps : {1e3, 1e-3}) {  // a fast ring hides behind the core; a slow one dominates
    platform.nvlink_bytes_per_s = gbps * 1e9;
    auto r = replay(plan, platform, costs);
    for (const Node& n : plan.nodes) {
      if (n.rank != 0 || n.phase != Phase::Forward || n.slot != Slot::PreDispatch || n.sends.empty()) continue;
      const double compute = costs.compute_seconds(n, platform.gpu, &plan.works.at(static_cast<std::size_t>(n.work)), false);
      const double ring = platform.nvlink_latency_s + n.sends[0].bytes / platform.nvlink_bytes_per_s;
      for (const auto& span : r.timeline.spans)
        if (span.device == 0 && span.args.at("node") == std::to_string(n.id))
          CHECK(span.duration_s == Approx(std::max(compute, ring)).epsilon(1e-6));
    }
  }
}

TEST_CASE("Megatron's reduce-scatter overlapped with the backward hides behind it", "[sim][kernels]") {
  using namespace ht::schedule;
  ModelDims d;  // default dims: large enough that GEMMs dominate
  d.seq_len = 4096;
  d.vocab = 1024;  // small embedding and output: only the first layers' bucket cannot overlap
  ParallelConfig c;
  c.dp = 2;
  c.microbatches = 2;
  c.optimizer.sync = GradSync::Megatron;
  c.optimizer.distributed = false;  // all-reduce only: no parameter gathers after the step
  c.optimizer.bucket_elements = 20e6;
  auto platform = preset("dgx-h100");  // each bucket's reduction is shorter than a layer's backward
  CostModel costs;
  c.optimizer.overlap_grad_reduce = false;
  const auto late = replay(build_plan(ht::patterns::parse("*-*-*-*-"), d, c, {}), platform, costs);
  c.optimizer.overlap_grad_reduce = true;
  const auto overlapped = replay(build_plan(ht::patterns::parse("*-*-*-*-"), d, c, {}), platform, costs);
  // Same reductions, same compute: overlap hides part of them and shortens the step.
  CHECK(overlapped.summary.dp_comm_s == Approx(late.summary.dp_comm_s).epsilon(0.05));
  CHECK(late.summary.dp_exposed_s == Approx(late.summary.dp_comm_s).epsilon(1e-6));
  CHECK(overlapped.summary.dp_exposed_s < 0.3 * late.summary.dp_comm_s);
  CHECK(overlapped.summary.step_time_s < late.summary.step_time_s);
}
