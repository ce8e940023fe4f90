// The kernel table of `calibrate --gpu` (engine/kernel_table.hpp) on its host emulation: every
// grid the options ask for is measured, and the cost-file form reads back to the same table;
// a grouped grid of the wrong size or a negative launch time is refused, naming the field.
#include <catch2/catch.hpp>

#include "ht/engine/kernel_table.hpp"

using namespace ht::engine;

TEST_CASE("the sustained fraction is the last quarter of the windows over the burst", "[engine][calibrate]") {
  // 8 windows: the last quarter is the last 2 (90 and 80), mean 85, over a burst of 100.
  CHECK(sustained_fraction({100, 99, 98, 97, 95, 92, 90, 80}, 100) == Approx(0.85));
  // Fewer than 4 windows: the last one.
  CHECK(sustained_fraction({100, 70}, 100) == Approx(0.7));
  CHECK(sustained_fraction({}, 100) == 0);
  CHECK(sustained_fraction({90}, 0) == 0);
}

TEST_CASE("the speed beside held SMs is alone over beside, and never above 1", "[engine][calibrate]") {
  CHECK(sharing_speed(1.0, 2.0) == Approx(0.5));
  CHECK(sharing_speed(3.0, 4.0) == Approx(0.75));
  CHECK(sharing_speed(1.0, 1.0) == 1.0);
  // A noisy alone (slower than beside) is no speed-up.
  CHECK(sharing_speed(1.6, 1.0) == 1.0);
}

TEST_CASE("the emulated kernel table measures every grid point and round-trips through its JSON",
          "[engine][calibrate]") {
  KernelBenchOptions o;
  o.emulate = true;
  o.repeats = 1;
  o.sizes = {64, 128};
  o.grouped_experts = {2, 4};
  o.grouped_rows = {64, 256, 512};
  o.grouped_shapes = {{256, 512}, {128, 256}};
  o.sustain_seconds = 0.05;
  o.sharing_sms = {4, 16};
  const KernelTable t = measure_kernel_table(o);
  CHECK(t.emulated);
  CHECK(t.gemm_bf16_tflops.size() == 8);
  REQUIRE(t.grouped_seconds.size() == 2 * 3 * 2);
  for (double s : t.grouped_seconds) CHECK(s > 0);
  CHECK(t.grouped_launch_s > 0);
  CHECK(t.grouped_rows == o.grouped_rows);
  CHECK(t.grouped_shapes == o.grouped_shapes);
  const KernelTable back = kernel_table_from_json(kernel_table_to_json(t));
  CHECK(back.grouped_experts == t.grouped_experts);
  CHECK(back.grouped_rows == t.grouped_rows);
  CHECK(back.grouped_shapes == t.grouped_shapes);
  CHECK(back.grouped_seconds == t.grouped_seconds);
  CHECK(back.grouped_launch_s == Approx(t.grouped_launch_s));
  CHECK(back.gemm_bf16_tflops == t.gemm_bf16_tflops);
  CHECK(t.sharing_sms == o.sharing_sms);
  REQUIRE(t.sharing_speed.size() == 2);
  for (double v : t.sharing_speed) CHECK((v > 0 && v <= 1));
  CHECK(back.sharing_sms == t.sharing_sms);
  CHECK(back.sharing_speed == t.sharing_speed);
  REQUIRE(t.window_tflops.size() >= 1);
  CHECK(t.sustained_fraction == Approx(sustained_fraction(t.window_tflops, t.burst_tflops)));
  CHECK(back.window_tflops == t.window_tflops);
  CHECK(back.sustained_fraction == Approx(t.sustained_fraction));
  CHECK(back.burst_tflops == Approx(t.burst_tflops));

  nlohmann::json j = kernel_table_to_json(t);
  j["grouped"]["seconds"].erase(0);
  CHECK_THROWS_WITH(kernel_table_from_json(j), Catch::Contains("experts x rows x shapes = 12 numbers"));
  j = kernel_table_to_json(t);
  j["grouped"]["rows"] = {256, 64, 512};
  CHECK_THROWS_WITH(kernel_table_from_json(j), Catch::Contains("'grouped.rows' must be an array of 1 to 16 ascending"));
  j = kernel_table_to_json(t);
  j["grouped_launch_us"] = -1;
  CHECK_THROWS_WITH(kernel_table_from_json(j), Catch::Contains("'grouped_launch_us' must be a number in [0"));
  j = kernel_table_to_json(t);
  j["sustained"]["fraction"] = 0.01;
  CHECK_THROWS_WITH(kernel_table_from_json(j), Catch::Contains("[0.3, 2]"));
  j = kernel_table_to_json(t);
  j["sm_sharing"]["speed"] = {0.9};
  CHECK_THROWS_WITH(kernel_table_from_json(j), Catch::Contains("'sm_sharing' must be"));
  // A table with neither grouped GEMMs nor a sustained rate (an older file's) writes neither and
  // reads back.
  KernelTable plain;
  plain.sizes = {64, 128};
  plain.gemm_bf16_tflops.assign(8, 1.5);
  plain.hbm_bytes_per_s = 2e12;
  const nlohmann::json pj = kernel_table_to_json(plain);
  CHECK_FALSE(pj.contains("grouped"));
  CHECK_FALSE(pj.contains("sustained"));
  CHECK_FALSE(pj.contains("sm_sharing"));
  const KernelTable plain_back = kernel_table_from_json(pj);
  CHECK(plain_back.grouped_seconds.empty());
  CHECK(plain_back.sustained_fraction == 0);
  CHECK(plain_back.gemm_bf16_tflops == plain.gemm_bf16_tflops);
  // A grid the options cannot describe is refused before anything runs.
  o.grouped_rows = {256, 64};
  CHECK_THROWS_WITH(measure_kernel_table(o), Catch::Contains("must be ascending and positive"));
}

TEST_CASE("a measured part out of its range is left out with the reader's reason, the rest kept",
          "[engine][calibrate]") {
  // A table built by hand, every part readable: the grid's numbers need no GPU.
  KernelTable t;
  t.sizes = {64, 128};
  t.gemm_bf16_tflops.assign(8, 1.5);
  t.hbm_bytes_per_s = 2e12;
  t.grouped_experts = {2, 4};
  t.grouped_rows = {64};
  t.grouped_shapes = {{256, 512}};
  t.grouped_seconds = {1e-5, 2e-5};
  t.grouped_launch_s = 3e-5;
  t.sustained_size = 8192;
  t.burst_tflops = 700;
  t.window_tflops = {700, 650};
  t.sustained_fraction = 650.0 / 700;
  t.sharing_sms = {8, 16};
  t.sharing_speed = {0.9, 0.8};
  KernelTable whole = t;
  CHECK(drop_unreadable_parts(whole).empty());
  CHECK(whole.grouped_seconds == t.grouped_seconds);
  CHECK(whole.sustained_fraction == t.sustained_fraction);
  CHECK(whole.sharing_speed == t.sharing_speed);

  // A throttled sustained rate (0.1 of the burst) and a speed of 3 beside held SMs: both parts go,
  // each with its reason; the grouped GEMMs stay, and what is left reads back.
  KernelTable bad = t;
  bad.sustained_fraction = 0.1;
  bad.sharing_speed = {3.0, 0.8};
  const std::vector<std::string> dropped = drop_unreadable_parts(bad);
  REQUIRE(dropped.size() == 2);
  CHECK_THAT(dropped[0], Catch::StartsWith("sustained left out: ") && Catch::Contains("[0.3, 2]"));
  CHECK_THAT(dropped[1], Catch::StartsWith("sm_sharing left out: ") && Catch::Contains("(0, 1.5]"));
  CHECK(bad.sustained_fraction == 0);
  CHECK(bad.window_tflops.empty());
  CHECK(bad.sharing_sms.empty());
  CHECK(bad.grouped_seconds == t.grouped_seconds);
  CHECK(bad.grouped_launch_s == t.grouped_launch_s);
  const nlohmann::json j = kernel_table_to_json(bad);
  CHECK_FALSE(j.contains("sustained"));
  CHECK_FALSE(j.contains("sm_sharing"));
  CHECK(kernel_table_from_json(j).grouped_seconds == t.grouped_seconds);

  // A grouped time of zero takes the grouped part and its host time with it.
  KernelTable zero = t;
  zero.grouped_seconds = {0, 2e-5};
  REQUIRE(drop_unreadable_parts(zero).size() == 1);
  CHECK(zero.grouped_seconds.empty());
  CHECK(zero.grouped_launch_s == 0);
  CHECK_FALSE(kernel_table_to_json(zero).contains("grouped_launch_us"));

  // Unreadable GEMM rates leave nothing to write.
  KernelTable broken = t;
  broken.gemm_bf16_tflops[3] = 0;
  CHECK_THROWS_WITH(drop_unreadable_parts(broken),
                    Catch::StartsWith("the measured GEMM rates or bandwidth are unreadable"));
}
