// The physical kernel model and the production layouts in the replay, against closed forms
// written here: GEMM tiles and waves, the memory floor of skinny GEMMs, which kernels each phase
// runs, flash-attention efficiency; TP collectives on NVLink inside a node, the CP ring
// overlapped with its attention core, the DDP reduce-scatter hidden behind the backward.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/replay.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
using ht::schedule::Kernel;
using ht::schedule::KernelKind;
using ht::schedule::Phase;

TEST_CASE("a GEMM on the measured grid runs at OpenXLA's sm_90 figure for its shape", "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // Entries of xla/service/gpu/model/matmul_interpolator_data.h (sm_90, batch 1, bf16), TFLOP/s.
  const struct { double m, n, k, tflops; } measured[] = {
      {4096, 4096, 4096, 780.2}, {2048, 2048, 2048, 641.0}, {1024, 2048, 2048, 529.5},
      {256, 4096, 4096, 418.4},  {256, 256, 256, 6.7},      {4096, 1024, 1024, 497.6}};
  for (const auto& e : measured) {
    INFO(e.m << " x " << e.n << " x " << e.k);
    CHECK(gemm_seconds(e.m, e.n, e.k, 1, 0, h100) == Approx(2 * e.m * e.n * e.k / (e.tflops * 1e12)).epsilon(1e-9));
  }
  // Between grid points the rate interpolates in log2 of each size: 3072 x 4096 x 4096 sits at
  // log2(3072/2048) of the way from the 2048 to the 4096 row.
  const double f = std::log2(1.5);
  const double rate = (1 - f) * 752.3 + f * 780.2;
  CHECK(gemm_seconds(3072, 4096, 4096, 1, 0, h100) == Approx(2 * 3072.0 * 4096 * 4096 / (rate * 1e12)).epsilon(1e-9));
}

TEST_CASE("beyond the measured grid: large sizes hold the edge rate, small ones the edge time",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 16384 rows run at the 4096-row rate (the large-shape plateau): four times the time.
  CHECK(gemm_seconds(16384, 4096, 4096, 1, 0, h100) == Approx(4 * gemm_seconds(4096, 4096, 4096, 1, 0, h100)));
  // 64 rows take as long as 256 (one row of tiles, the kernel's latency).
  CHECK(gemm_seconds(64, 4096, 4096, 1, 0, h100) == Approx(gemm_seconds(256, 4096, 4096, 1, 0, h100)));
  // Another GPU scales the measured fraction of peak by its own peak and best-shape fraction.
  const GpuSpec b200 = preset("dgx-b200").gpu;
  CHECK(gemm_seconds(4096, 4096, 4096, 1, 0, b200) ==
        Approx(gemm_seconds(4096, 4096, 4096, 1, 0, h100) * (989.0 / 2250) * (0.803 / 0.776)));
}

TEST_CASE("an FP8 GEMM runs the measured shape curve at the FP8 peak and its best fraction", "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 4096^3: 780.2 of 989 TFLOP/s in BF16, i.e. 780.2/794.5 of the best shape; FP8's best shape is
  // 1402.6 of 1979 TFLOP/s (MAMF), so this shape runs at 780.2/989 x 1979 x 0.709/0.803.
  const double rate = 780.2 / 989 * 1979e12 * 0.709 / 0.803;
  CHECK(gemm_seconds(4096, 4096, 4096, 1, 0, h100, true) == Approx(2 * 4096.0 * 4096 * 4096 / rate).epsilon(1e-9));
  const Kernel bf16{KernelKind::Gemm, true, 4096, 4096, 4096, 1, 0, 0};
  Kernel fp8 = bf16;
  fp8.fp8 = true;
  CHECK(kernel_seconds(fp8, Phase::Forward, false, h100) / kernel_seconds(bf16, Phase::Forward, false, h100) ==
        Approx(989.0 * 0.803 / (1979 * 0.709)));
}

TEST_CASE("a synchronous step computes at the slowest GPU's pace: 5 % below a benchmarked GPU",
          "[sim][kernels]") {
  GpuSpec h100 = preset("dgx-h100").gpu;
  ht::schedule::Work large{{{KernelKind::Gemm, true, 4096, 4096, 4096, 1, 2 * 4096.0 * 4096 * 4096, 0}}};
  ht::schedule::Node n;
  n.flops = 1;
  const CostModel costs;
  CHECK(costs.compute_seconds(n, h100, &large) == Approx(gemm_seconds(4096, 4096, 4096, 1, 0, h100) / 0.95));
  h100.slow_gpu_spread = 0;
  CHECK(costs.compute_seconds(n, h100, &large) == Approx(gemm_seconds(4096, 4096, 4096, 1, 0, h100)));
}

TEST_CASE("a measured kernel table prices GEMMs at its own rates and memory at its bandwidth", "[sim][kernels]") {
  // Two sizes, 8 shapes: rate = 100 + the shape's index (TFLOP/s), HBM 2000 GB/s.
  std::string rates;
  for (int i = 0; i < 8; ++i) rates += (i ? ", " : "") + std::to_string(100 + i);
  const CostModel costs = parse_costs_json(R"({"kernel_table": {"device": "test", "sizes": [512, 2048],
      "gemm_bf16_tflops": [)" + rates + R"(], "hbm_gbps": 2000}})");
  PlatformSpec p = preset("dgx-h100");
  apply_kernel_table(p, costs);
  // Index (im * 2 + in) * 2 + ik: 512 x 2048 x 512 is (0, 1, 0) = 2 -> 102 TFLOP/s.
  CHECK(gemm_seconds(512, 2048, 512, 1, 0, p.gpu) == Approx(2 * 512.0 * 2048 * 512 / 102e12));
  CHECK(gemm_seconds(2048, 2048, 2048, 1, 0, p.gpu) == Approx(2 * 2048.0 * 2048 * 2048 / 107e12));
  // Half way in log2 between 512 and 2048 on m (1024): the mean of (0,0,0) and (1,0,0).
  CHECK(gemm_seconds(1024, 512, 512, 1, 0, p.gpu) == Approx(2 * 1024.0 * 512 * 512 / ((100 + 104) / 2.0 * 1e12)));
  // Memory-bound kernels at the measured 2000 of the spec's 3350 GB/s.
  CHECK(p.gpu.hbm_efficiency == Approx(2000.0 / 3350));
  const Kernel norm{KernelKind::Elementwise, false, 0, 0, 0, 1, 0, 1e9};
  CHECK(kernel_seconds(norm, Phase::Forward, false, p.gpu) == Approx(1e9 / 2000e9));
  // A table with the wrong number of rates is refused, naming the field.
  CHECK_THROWS_WITH(parse_costs_json(R"({"kernel_table": {"sizes": [512, 2048], "gemm_bf16_tflops": [1, 2],
      "hbm_gbps": 2000}})"), Catch::Contains("sizes^3 = 8 numbers"));
}

TEST_CASE("a measured table's grouped GEMMs price the experts at what the GPU did", "[sim][kernels]") {
  // The GEMM rates of the table above; the grouped grid's times are written as multiples of the
  // twin's rule on that table (one GEMM per expert, up to 4 side by side), so the closed form of
  // every price is the multiple times the rule.
  std::string rates;
  for (int i = 0; i < 8; ++i) rates += (i ? ", " : "") + std::to_string(100 + i);
  const std::string table =
      R"("device": "test", "sizes": [512, 2048], "gemm_bf16_tflops": [)" + rates + R"(], "hbm_gbps": 2000)";
  PlatformSpec plain = preset("dgx-h100");
  apply_kernel_table(plain, parse_costs_json("{\"kernel_table\": {" + table + "}}"));
  const auto rule = [&](double m, double g, double k, double n) {
    return gemm_seconds(m, n, k, g, 2 * (g * k * n + g * m * (k + n)), plain.gpu);
  };
  // experts [4, 16], rows [256, 1024], shapes (k, n) [(2048, 1024), (512, 2048)]: shape 0 at twice
  // the rule, except 4 experts x 1024 rows at four times; shape 1 at three times.
  const double experts[] = {4, 16}, rows[] = {256, 1024};
  const std::pair<double, double> shapes[] = {{2048, 1024}, {512, 2048}};
  std::ostringstream seconds;
  seconds.precision(17);
  for (int ie = 0; ie < 2; ++ie)
    for (int ir = 0; ir < 2; ++ir)
      for (int is = 0; is < 2; ++is) {
        const double times = is == 1 ? 3 : (ie == 0 && ir == 1 ? 4 : 2);
        seconds << (ie + ir + is ? ", " : "")
                << times * rule(rows[ir], experts[ie], shapes[is].first, shapes[is].second);
      }
  const std::string grouped =
      R"(, "grouped": {"experts": [4, 16], "rows": [256, 1024], "shapes": [[2048, 1024], [512, 2048]],
      "seconds": [)" +
      seconds.str() + R"(]}, "grouped_launch_us": 25)";
  const CostModel costs = parse_costs_json("{\"kernel_table\": {" + table + grouped + "}}");
  PlatformSpec p = preset("dgx-h100");
  apply_kernel_table(p, costs);
  const auto expert_gemm = [](double m, double g, double k, double n) {
    return Kernel{KernelKind::GroupedGemm, true, m, n, k, g, 2 * g * m * n * k, 2 * (g * k * n + g * m * (k + n))};
  };
  // On a grid point: the measured time itself.
  CHECK(kernel_seconds(expert_gemm(256, 4, 2048, 1024), Phase::Forward, false, p.gpu) ==
        Approx(2 * rule(256, 4, 2048, 1024)));
  CHECK(kernel_seconds(expert_gemm(1024, 4, 2048, 1024), Phase::Forward, false, p.gpu) ==
        Approx(4 * rule(1024, 4, 2048, 1024)));
  // 512 rows, half way in log2 between 256 and 1024 at 4 experts: the ratio half way, 3.
  CHECK(kernel_seconds(expert_gemm(512, 4, 2048, 1024), Phase::Forward, false, p.gpu) ==
        Approx(3 * rule(512, 4, 2048, 1024)));
  // Off the grid (8 experts, beyond the rows, a shape near (2048, 1024)): 16 experts' 2 and 4
  // experts' 4 (clamped at 1024 rows) half way in log2 of the experts, 3; the backward's data and
  // weight gradients take the same factor.
  const Kernel near0 = expert_gemm(4096, 8, 1800, 1100);
  const Kernel bare0{KernelKind::Gemm, true, 4096, 1100, 1800, 8, near0.flops, near0.bytes};
  CHECK(kernel_seconds(near0, Phase::Forward, false, p.gpu) ==
        Approx(3 * kernel_seconds(bare0, Phase::Forward, false, p.gpu)));
  CHECK(kernel_seconds(near0, Phase::Backward, false, p.gpu) ==
        Approx(3 * kernel_seconds(bare0, Phase::Backward, false, p.gpu)));
  // A shape nearer (512, 2048) takes its 3 everywhere.
  const Kernel near1 = expert_gemm(700, 10, 600, 2500);
  const Kernel bare1{KernelKind::Gemm, true, 700, 2500, 600, 10, near1.flops, near1.bytes};
  CHECK(kernel_seconds(near1, Phase::Weight, true, p.gpu) ==
        Approx(3 * kernel_seconds(bare1, Phase::Weight, true, p.gpu)));
  // One expert on the rank is one GEMM: the GEMM table's, no correction.
  CHECK(grouped_correction(256, 1, 2048, 1024, p.gpu) == 1);
  CHECK(grouped_correction(256, 4, 2048, 1024, plain.gpu) == 1);
  // The table's measure of TE's host loop prices the expert launches, unless the file sets its own.
  CHECK(costs.grouped_launch_s == Approx(25e-6));
  CHECK(parse_costs_json("{\"grouped_launch_us\": 40, \"kernel_table\": {" + table + grouped + "}}").grouped_launch_s ==
        Approx(40e-6));
  // A grid with a time missing is refused, naming the field.
  CHECK_THROWS_WITH(
      parse_costs_json(
          "{\"kernel_table\": {" + table +
          R"(, "grouped": {"experts": [4, 16], "rows": [256, 1024], "shapes": [[2048, 1024]], "seconds": [1, 2, 3]}}})"),
      Catch::Contains("experts x rows x shapes = 4 numbers"));
}

TEST_CASE("a measured sustained rate puts compute-bound kernels and the clock under overlap at it", "[sim][kernels]") {
  // Every rate table is a burst figure; a GPU measured to sustain 0.9 of its burst runs its GEMMs
  // (the table's own), attention, scans and GDN's recurrence at 0.9 of them, and its clock under
  // overlap (1575 of a 1980 MHz burst) at 1575/1980/0.9 of the sustained clock; memory-bound
  // kernels keep the measured bandwidth.
  std::string rates;
  for (int i = 0; i < 8; ++i) rates += (i ? ", " : "") + std::to_string(100 + i);
  const std::string table = R"({"kernel_table": {"sizes": [512, 2048], "gemm_bf16_tflops": [)" + rates +
                            R"(], "hbm_gbps": 2000)";
  PlatformSpec burst = preset("dgx-h100"), held = preset("dgx-h100");
  apply_kernel_table(burst, parse_costs_json(table + "}}"));
  apply_kernel_table(held, parse_costs_json(table + R"(, "sustained": {"size": 8192, "fraction": 0.9}}})"));
  CHECK(gemm_seconds(2048, 2048, 2048, 1, 0, held.gpu) == Approx(2 * 2048.0 * 2048 * 2048 / (0.9 * 107e12)));
  const Kernel attention{KernelKind::Attention, false, 4096, 2048, 128, 1, 1e12, 0};
  CHECK(kernel_seconds(attention, Phase::Forward, false, held.gpu) ==
        Approx(kernel_seconds(attention, Phase::Forward, false, burst.gpu) / 0.9));
  const Kernel scan{KernelKind::Scan, false, 0, 0, 0, 1, 1e12, 0};
  CHECK(kernel_seconds(scan, Phase::Forward, false, held.gpu) ==
        Approx(kernel_seconds(scan, Phase::Forward, false, burst.gpu) / 0.9));
  const Kernel norm{KernelKind::Elementwise, false, 0, 0, 0, 1, 0, 1e9};
  CHECK(kernel_seconds(norm, Phase::Forward, false, held.gpu) == Approx(1e9 / 2000e9));
  CHECK(held.gpu.overlap_clock == Approx(1575.0 / 1980 / 0.9));
  // A GPU that sustains its burst (or more, within the noise) changes nothing.
  PlatformSpec full = preset("dgx-h100");
  apply_kernel_table(full, parse_costs_json(table + R"(, "sustained": {"fraction": 1.02}}})"));
  CHECK(gemm_seconds(2048, 2048, 2048, 1, 0, full.gpu) == Approx(gemm_seconds(2048, 2048, 2048, 1, 0, burst.gpu)));
  CHECK(full.gpu.overlap_clock == Approx(1575.0 / 1980));
  CHECK_THROWS_WITH(parse_costs_json(table + R"(, "sustained": {"size": 8192}}})"), Catch::Contains("'fraction'"));
  CHECK_THROWS_WITH(parse_costs_json(table + R"(, "sustained": {"fraction": 0.001}}})"), Catch::Contains("[0.3, 2]"));
  // Grouped GEMMs are short runs too: measured against the rule at the burst rates, priced at the
  // sustained ones, so a compute-bound group measured at exactly the burst rule costs the rule at
  // the sustained rate, 1/0.9 of it.
  const double burst_rule = gemm_seconds(2048, 2048, 2048, 4, 0, burst.gpu);
  std::ostringstream grouped;
  grouped.precision(17);
  grouped
      << R"(, "sustained": {"fraction": 0.9}, "grouped": {"experts": [4], "rows": [2048], "shapes": [[2048, 2048]], "seconds": [)"
      << burst_rule << "]}}}";
  PlatformSpec both = preset("dgx-h100");
  apply_kernel_table(both, parse_costs_json(table + grouped.str()));
  const Kernel experts{KernelKind::GroupedGemm, true, 2048, 2048, 2048, 4, 2 * 4 * 2048.0 * 2048 * 2048, 0};
  CHECK(kernel_seconds(experts, Phase::Forward, false, both.gpu) == Approx(burst_rule / 0.9));
  CHECK(gemm_seconds_burst(2048, 2048, 2048, 4, 0, both.gpu) == Approx(burst_rule));
}

TEST_CASE("grouped GEMMs measured at a constant multiple of the rule are priced at that multiple everywhere",
          "[sim][kernels][property]") {
  // Any grid (1-4 expert counts, 1-4 row counts, 1-3 shapes), every point measured at c times the
  // rule: the bilinear ratio is c at every rows, experts and (k, n), inside the grid or beyond it.
  rc::prop("grouped correction of a constant", [] {
    auto ascending = [](int count, int lo, int hi) {
      std::vector<int> v = *rc::gen::unique<std::vector<int>>(count, rc::gen::inRange(lo, hi));
      std::sort(v.begin(), v.end());
      return v;
    };
    const auto experts = ascending(*rc::gen::inRange(1, 5), 2, 65);
    const auto rows = ascending(*rc::gen::inRange(1, 5), 16, 8193);
    const int shapes = *rc::gen::inRange(1, 4);
    const double c = *rc::gen::inRange(50, 400) / 100.0;
    std::string rates;
    for (int i = 0; i < 8; ++i) rates += (i ? ", " : "") + std::to_string(300 + 10 * i);
    const std::string table = R"({"kernel_table": {"sizes": [512, 2048], "gemm_bf16_tflops": [)" + rates +
                              R"(], "hbm_gbps": 3000)";
    PlatformSpec plain = preset("dgx-h100");
    apply_kernel_table(plain, parse_costs_json(table + "}}"));
    std::vector<std::pair<int, int>> kn;
    for (int i = 0; i < shapes; ++i) kn.emplace_back(256 << i, 8192 >> i);
    std::ostringstream j;
    j.precision(17);
    j << table << R"(, "grouped": {"experts": [)";
    for (std::size_t i = 0; i < experts.size(); ++i) j << (i ? ", " : "") << experts[i];
    j << R"(], "rows": [)";
    for (std::size_t i = 0; i < rows.size(); ++i) j << (i ? ", " : "") << rows[i];
    j << R"(], "shapes": [)";
    for (std::size_t i = 0; i < kn.size(); ++i) j << (i ? ", " : "") << "[" << kn[i].first << ", " << kn[i].second << "]";
    j << R"(], "seconds": [)";
    bool first = true;
    for (int g : experts)
      for (int m : rows)
        for (const auto& [k, n] : kn) {
          j << (first ? "" : ", ") << c * gemm_seconds(m, n, k, g, 2.0 * (g * k * n + g * m * (k + n)), plain.gpu);
          first = false;
        }
    j << "]}}}";
    PlatformSpec p = preset("dgx-h100");
    apply_kernel_table(p, parse_costs_json(j.str()));
    const double g = *rc::gen::inRange(2, 129), m = *rc::gen::inRange(1, 20000);
    const double k = *rc::gen::inRange(64, 16384), n = *rc::gen::inRange(64, 16384);
    RC_ASSERT(std::abs(grouped_correction(m, g, k, n, p.gpu) - c) <= 1e-9 * c);
  });
}

TEST_CASE("GEMMs measured beside held SMs give the share compute keeps beside a communication kernel",
          "[sim][kernels]") {
  // Without a measurement: (S - s)/S at the clock under overlap. With one (GEMMs at 0.9 of their
  // speed beside 8 held SMs, 0.6 beside 16): linear between (0, 1) and the points, and beyond the
  // last the rule's shrinking, (S - s)/(S - 16), all at the same clock.
  std::string rates;
  for (int i = 0; i < 8; ++i) rates += (i ? ", " : "") + std::to_string(100 + i);
  const std::string table =
      R"({"kernel_table": {"sizes": [512, 2048], "gemm_bf16_tflops": [)" + rates + R"(], "hbm_gbps": 2000)";
  const CostModel none;
  PlatformSpec rule = preset("dgx-h100");
  apply_kernel_table(rule, parse_costs_json(table + "}}"));
  const double c = 1575.0 / 1980;
  CHECK(speed_beside_comm(none, rule, 20) == Approx(112.0 / 132 * c));
  PlatformSpec p = preset("dgx-h100");
  apply_kernel_table(p, parse_costs_json(table + R"(, "sm_sharing": {"sms": [8, 16], "speed": [0.9, 0.6]}}})"));
  CHECK(speed_beside_comm(none, p, 16) == Approx(0.6 * c));
  CHECK(speed_beside_comm(none, p, 12) == Approx(0.75 * c));
  CHECK(speed_beside_comm(none, p, 4) == Approx(0.95 * c));
  CHECK(speed_beside_comm(none, p, 32) == Approx(0.6 * (132.0 - 32) / (132 - 16) * c));
  CHECK(speed_beside_comm(none, p, 0) == Approx(c));
  // A calibrated interference factor still wins.
  CostModel calibrated;
  calibrated.interference_factor = 2;
  CHECK(speed_beside_comm(calibrated, p, 16) == Approx(0.5));
  CHECK_THROWS_WITH(parse_costs_json(table + R"(, "sm_sharing": {"sms": [16, 8], "speed": [0.9, 0.6]}}})"),
                    Catch::Contains("sm_sharing"));
}

TEST_CASE("a grouped GEMM runs one GEMM per expert, up to four side by side while their tiles fit",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 256 rows x 1024 columns: 2 x 8 = 16 tiles of 128 x 128, so 8 fit on 132 SMs; Transformer
  // Engine runs them on 4 streams: 16 experts take 4 expert-times, unless one GEMM of all
  // 4096 rows is slower still.
  const double one = gemm_seconds(256, 1024, 4096, 1, 0, h100);
  const double fused = 2 * 4096.0 * 1024 * 4096 / gemm_rate(4096, 1024, 4096, h100);
  CHECK(gemm_seconds(256, 1024, 4096, 16, 0, h100) == Approx(std::max(16 * one / 4, fused)));
  // 2048 x 4096 = 16 x 32 = 512 tiles: one expert fills the GPU, so they run one after another.
  const double big = gemm_seconds(2048, 4096, 4096, 1, 0, h100);
  CHECK(gemm_seconds(2048, 4096, 4096, 4, 0, h100) == Approx(4 * big));
}

TEST_CASE("a permutation moves its rows at the permute kernels' share of HBM, once each way",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 8192 token copies of 4096 bf16 elements, read and written: 134 MB at 0.4 of 3.35 TB/s.
  const double bytes = 2 * 8192.0 * 4096 * 2;
  const Kernel perm{KernelKind::Permute, false, 0, 0, 0, 1, 0, bytes};
  CHECK(kernel_seconds(perm, Phase::Forward, false, h100) == Approx(bytes / (3.35e12 * 0.4)));
  CHECK(kernel_seconds(perm, Phase::Backward, false, h100) == Approx(bytes / (3.35e12 * 0.4)));
  CHECK(kernel_seconds(perm, Phase::Weight, true, h100) == 0);
}

TEST_CASE("GDN's chunked delta rule runs at FLA's measured H100 rate for its chains of recurrence",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // FLA's Triton forward on an H100, d = 128 (flashinfer PRs 3866 and 3788), at shapes the two
  // rates were not read from: 8 chains (2 q/k heads, 8 value heads) over 16384 and 32768 tokens,
  // 0.508 and 0.997 ms; 32 sequences x 32 value heads of 8192 tokens, 18.081 ms.
  const auto forward_ms = [&](double tokens, double sequence, double value_heads) {
    const double chains = tokens / sequence * value_heads;
    const Kernel k{KernelKind::DeltaRule, false, sequence, chains, 0, 1, 6 * tokens * value_heads * 128 * 128, 0};
    return 1e3 * kernel_seconds(k, Phase::Forward, false, h100);
  };
  CHECK(forward_ms(16384, 16384, 8) == Approx(0.508).epsilon(0.06));
  CHECK(forward_ms(32768, 32768, 8) == Approx(0.997).epsilon(0.06));
  CHECK(forward_ms(32 * 8192.0, 8192, 32) == Approx(18.081).epsilon(0.06));
  // Between 8 and 64 chains the rate follows log2 of the chains: 16 chains a third of the way.
  const double flops = 6 * 4096.0 * 16 * 128 * 128;
  const Kernel mid{KernelKind::DeltaRule, false, 4096, 16, 0, 1, flops, 0};
  CHECK(kernel_seconds(mid, Phase::Forward, false, h100) == Approx(flops / ((26.4 + (47.6 - 26.4) / 3) * 1e12)));
  // The backward takes 3.45 forwards (FLA's fwd+bwd benchmark), W nothing; 6 and 7 launches.
  CHECK(kernel_seconds(mid, Phase::Backward, false, h100) == Approx(3.45 * kernel_seconds(mid, Phase::Forward, false, h100)));
  CHECK(kernel_seconds(mid, Phase::Weight, true, h100) == 0);
  CHECK(kernel_launches(mid, Phase::Forward, false) == 6);
  CHECK(kernel_launches(mid, Phase::Backward, true) == 7);
  // Blackwell: 1.58x the H100's rate at the same chains.
  const GpuSpec b200 = preset("dgx-b200").gpu;
  CHECK(kernel_seconds(mid, Phase::Forward, false, b200) == Approx(kernel_seconds(mid, Phase::Forward, false, h100) / 1.58));
}

TEST_CASE("the host launches every kernel: a node takes the longer of its GPU and host time",
          "[sim][kernels]") {
  GpuSpec h100 = preset("dgx-h100").gpu;
  h100.slow_gpu_spread = 0;  // the GPU side alone here; the slowest GPU's pace has its own test
  CostModel costs;
  // 100 tiny GEMMs: each 5 us on the GPU (the 256^3 latency floor), 11 us to launch from Python.
  ht::schedule::Work tiny;
  for (int i = 0; i < 100; ++i) tiny.kernels.push_back({KernelKind::Gemm, true, 256, 256, 256, 1, 2 * 256.0 * 256 * 256, 0});
  ht::schedule::Node n;
  n.flops = 1;
  n.phase = Phase::Forward;
  CHECK(costs.compute_seconds(n, h100, &tiny) == Approx(100 * 11e-6));
  n.phase = Phase::Backward;  // dgrad + wgrad: 200 launches
  CHECK(costs.compute_seconds(n, h100, &tiny) == Approx(200 * 11e-6));
  // CUDA graphs replay them without the host.
  CHECK(costs.compute_seconds(n, h100, &tiny, false, true) == Approx(work_seconds(tiny, Phase::Backward, false, h100)));
  // A grouped GEMM of 16 experts: one Python call, then 16 expert GEMMs from TE's C++ loop at
  // TE PR 3134's (267 - 11) / 8 us each; a CUDA graph cannot capture dropless experts.
  ht::schedule::Work experts{{{KernelKind::GroupedGemm, true, 64, 256, 256, 16, 0, 0}}};
  n.phase = Phase::Forward;
  CHECK(costs.host_seconds(experts, Phase::Forward, false, false) == Approx(11e-6 + 16 * 32e-6));
  CHECK(costs.host_seconds(experts, Phase::Forward, false, true) == Approx(11e-6 + 16 * 32e-6));
  CHECK(costs.host_seconds(experts, Phase::Backward, true, false) == Approx(11e-6 + 16 * 32e-6));
  CHECK(costs.host_seconds(experts, Phase::Backward, false, false) == Approx(2 * (11e-6 + 16 * 32e-6)));
  // A large GEMM is GPU-bound: the host's 11 us hide behind it.
  ht::schedule::Work large{{{KernelKind::Gemm, true, 4096, 4096, 4096, 1, 2 * 4096.0 * 4096 * 4096, 0}}};
  CHECK(costs.compute_seconds(n, h100, &large) == Approx(gemm_seconds(4096, 4096, 4096, 1, 0, h100)));
}

TEST_CASE("a GEMM never runs faster than its bytes stream from HBM", "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 64 rows against 7168 x 16384 weights: the compute side is the 256-row time at the grid's
  // edge rate; the weights alone take 235 MB / (0.8 x 3.35 TB/s).
  const double m = 64, n = 7168, k = 16384, bytes = (m * k + k * n + m * n) * 2;
  const double floor = bytes / (3.35e12 * 0.8);
  const double compute = gemm_seconds(m, n, k, 1, 0, h100);
  CHECK(gemm_seconds(m, n, k, 1, bytes, h100) == Approx(std::max(floor, compute)));
  CHECK(gemm_seconds(m, n, k, 1, 10 * bytes, h100) == Approx(10 * floor));
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

// Issue 30 item 2, the kernel model per phase on generated kernels of every kind: a node's time is
// the sum of its kernels' times in every phase; delaying weight gradients moves exactly the
// weight-gradient GEMMs from B to W and changes no other phase; and no kernel beats physics -- a
// GEMM never runs faster than its 2 m n k FLOPs per group at the GPU's (FP8) peak in each pass
// (forward, data gradient, weight gradient) nor than its bytes at the HBM's full bandwidth, and
// neither do attention (2.5x its FLOPs backward), scans, elementwise kernels or permutations.
namespace {
struct KernelCase {
  std::string platform;
  Kernel kernel;
};
void showValue(const KernelCase& c, std::ostream& os) {
  const Kernel& k = c.kernel;
  os << c.platform << " " << ht::schedule::to_string(k.kind) << " m " << k.m << " n " << k.n << " k " << k.k
     << " groups " << k.groups << " flops " << k.flops << " bytes " << k.bytes << " fp8 " << k.fp8 << " delayable "
     << k.delayable;
}
rc::Gen<KernelCase> kernel_cases() {
  return rc::gen::exec([] {
    KernelCase c;
    c.platform = *rc::gen::element<std::string>("dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72", "dgx-h800");
    Kernel& k = c.kernel;
    k.kind = *rc::gen::element(KernelKind::Gemm, KernelKind::GroupedGemm, KernelKind::Attention, KernelKind::Scan,
                               KernelKind::DeltaRule, KernelKind::Elementwise, KernelKind::Permute);
    auto size = [] { return std::pow(2.0, *rc::gen::inRange(0, 161) / 10.0); };  // 1 .. 65536
    k.m = size(), k.n = size(), k.k = size();
    k.groups = k.kind == KernelKind::GroupedGemm ? *rc::gen::inRange(1, 65) : 1;
    const bool gemm = k.kind == KernelKind::Gemm || k.kind == KernelKind::GroupedGemm;
    k.fp8 = gemm && *rc::gen::arbitrary<bool>();
    k.delayable = *rc::gen::arbitrary<bool>();
    const double natural = gemm ? 2 * (k.m * k.k + k.k * k.n + k.m * k.n) * k.groups : 2 * k.m * k.n;
    k.bytes = natural * *rc::gen::element(0.0, 0.5, 1.0, 4.0);
    // Permutations move rows and compute nothing.
    k.flops = gemm                              ? 2 * k.m * k.n * k.k * k.groups
              : k.kind == KernelKind::Permute ? 0
                                              : 4 * k.m * k.n * k.k * *rc::gen::element(0.0, 1.0);
    return c;
  });
}
bool at_least(double t, double floor) { return t >= floor * (1 - 1e-12); }
}  // namespace

TEST_CASE("the kernel model per phase: additive, delay moves B to W, never faster than peak or HBM",
          "[sim][kernels][property]") {
  rc::prop("generated kernels of every kind on every preset", [] {
    const KernelCase c = *kernel_cases();
    const GpuSpec g = preset(c.platform).gpu;
    const Kernel& k = c.kernel;
    RC_TAG(std::string(ht::schedule::to_string(k.kind)));
    // Additivity: a node of this kernel and two others is priced as the three apart.
    Kernel other = k;
    other.m = std::max(1.0, k.n / 2), other.bytes = k.bytes / 3 + 1;
    const ht::schedule::Work work{{k, other, k}};
    for (const Phase p : {Phase::Forward, Phase::Recompute, Phase::Backward, Phase::Weight})
      for (const bool delay : {false, true}) {
        const double parts =
            2 * kernel_seconds(k, p, delay, g) + kernel_seconds(other, p, delay, g);
        RC_ASSERT(std::abs(work_seconds(work, p, delay, g) - parts) <= 1e-12 * parts);
      }
    // Delaying weight gradients: B + W is the undelayed B; forward and recompute do not move.
    const double b = kernel_seconds(k, Phase::Backward, false, g);
    const double b_delayed = kernel_seconds(k, Phase::Backward, true, g);
    const double w = kernel_seconds(k, Phase::Weight, true, g);
    RC_ASSERT(std::abs(b - (b_delayed + w)) <= 1e-12 * b);
    RC_ASSERT(kernel_seconds(k, Phase::Forward, true, g) == kernel_seconds(k, Phase::Forward, false, g));
    RC_ASSERT(kernel_seconds(k, Phase::Recompute, false, g) == kernel_seconds(k, Phase::Forward, false, g));
    const bool gemm = k.kind == KernelKind::Gemm || k.kind == KernelKind::GroupedGemm;
    RC_ASSERT(w == 0 || (gemm && k.delayable));
    if (!(gemm && k.delayable)) RC_ASSERT(b_delayed == b);
    // Physics floors, from the spec sheet's peaks alone.
    const double peak = k.fp8 ? g.fp8_peak_flops : g.peak_flops;
    const double hbm = g.hbm_bytes_per_s;
    const double fwd = kernel_seconds(k, Phase::Forward, false, g);
    if (gemm) {
      const double pass = 2 * k.m * k.n * k.k * k.groups / peak;
      const double bytes = k.fp8 ? k.bytes / 2 : k.bytes;
      RC_ASSERT(at_least(fwd, pass));
      RC_ASSERT(at_least(fwd, bytes / hbm));
      RC_ASSERT(at_least(b, 2 * pass));
      RC_ASSERT(at_least(b_delayed, pass));
      if (k.delayable) RC_ASSERT(at_least(w, pass));
    } else {
      const double factor = k.kind == KernelKind::Attention ? 2.5 : 2;
      RC_ASSERT(at_least(fwd, k.flops / g.peak_flops));
      RC_ASSERT(at_least(b, factor * k.flops / g.peak_flops));
      RC_ASSERT(at_least(fwd, k.bytes / hbm));
      RC_ASSERT(at_least(b, (k.kind == KernelKind::Permute ? 1 : 2) * k.bytes / hbm));
    }
  });
}

TEST_CASE("a weight gradient accumulates into the fp32 main gradient: k x n read and written in fp32",
          "[sim][kernels]") {
  const GpuSpec h100 = preset("dgx-h100").gpu;
  // 64 rows against 8192 x 8192 weights: the forward streams the bf16 weights once (134 MB); the
  // weight gradient (Megatron's gradient-accumulation fusion, beta = 1) reads and writes the fp32
  // main gradient, 8 bytes an element (537 MB), at 0.8 x 3.35 TB/s: far slower than its 8.6 GFLOP
  // (the forward, compute-bound at the table's 256-row edge rate, takes 82 us).
  const double m = 64, n = 8192, k = 8192;
  const double forward_bytes = (k * n + m * (k + n)) * 2.0;
  const Kernel gemm{KernelKind::Gemm, true, m, n, k, 1, 2 * m * n * k, forward_bytes};
  const double hbm = 3.35e12 * 0.8;
  CHECK(wgrad_bytes(gemm, forward_bytes) == Approx(k * n * 8 + m * (k + n) * 2.0));
  CHECK(kernel_seconds(gemm, Phase::Weight, true, h100) == Approx((k * n * 8 + m * (k + n) * 2.0) / hbm));
  CHECK(kernel_seconds(gemm, Phase::Forward, false, h100) == Approx(gemm_seconds(m, n, k, 1, forward_bytes, h100)));
  CHECK(kernel_seconds(gemm, Phase::Forward, false, h100) < kernel_seconds(gemm, Phase::Weight, true, h100) / 2);
  // Grouped: every expert's weights, the rows split between them; FP8 halves the operands, not the
  // fp32 main gradient.
  const double groups = 16, rows = 512;
  const double grouped_bytes = (groups * k * n + groups * rows * (k + n)) * 2.0;
  const Kernel experts{KernelKind::GroupedGemm, true, rows, n, k, groups, 2 * groups * rows * n * k, grouped_bytes};
  CHECK(wgrad_bytes(experts, grouped_bytes) == Approx(groups * k * n * 8 + groups * rows * (k + n) * 2.0));
  CHECK(wgrad_bytes(experts, grouped_bytes / 2) == Approx(groups * k * n * 8 + groups * rows * (k + n) * 1.0));
}
