// Overlap analytics and comparison on hand-built timelines (binary fractions of a second, so
// every figure is exact) and, as properties, against a brute-force cell count.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "ht/traces/compare.hpp"
#include "ht/traces/overlap.hpp"

using namespace ht::traces;

namespace {
Span compute(int device, int stream, double start, double dur, std::string cat = "mlp") {
  return {"c", std::move(cat), start, dur, device, stream, Role::Compute, {}};
}
Span comm(int device, int stream, double start, double dur, std::string cat = "dispatch") {
  return {"a2a", std::move(cat), start, dur, device, stream, Role::Comm, {}};
}
}  // namespace

TEST_CASE("comm under compute is hidden, comm beside it is exposed", "[overlap]") {
  Timeline t;
  t.spans = {compute(0, 0, 0.0, 1.0), comm(0, 1, 0.5, 1.0),  // [1, 1.5) exposed
             comm(0, 2, 1.25, 0.5, "combine"),                // overlaps the first comm: union
             compute(0, 0, 1.75, 0.25),                       // hides nothing (no comm there)
             {"idle", "bubble", 3.0, 1.0, 0, 0, Role::Other, {}}};
  const OverlapSummary s = summarize(t);
  REQUIRE(s.devices.size() == 1);
  CHECK(s.compute_busy_s == 1.25);
  CHECK(s.comm_busy_s == 1.25);      // [0.5, 1.75)
  CHECK(s.comm_exposed_s == 0.75);   // [1, 1.75)
  CHECK(s.hidden_fraction == 1 - 0.75 / 1.25);
  CHECK(s.span_s == 4.0);            // Other spans count for the span
  REQUIRE(s.longest_exposed.size() == 1);
  CHECK(s.longest_exposed[0].start_s == 1.0);
  CHECK(s.longest_exposed[0].end_s == 1.75);
  // Per category: dispatch exposed [1, 1.5), combine exposed [1.25, 1.75).
  std::map<std::string, CategoryRow> cats;
  for (const auto& c : s.categories) cats[c.category] = c;
  CHECK(cats["dispatch"].exposed_s == 0.5);
  CHECK(cats["combine"].exposed_s == 0.5);
  CHECK(cats["mlp"].busy_s == 1.25);
  CHECK(cats["bubble"].total_s == 1.0);
  // Per kernel: both comm spans are named "a2a"; each span's exposed part counts.
  const auto a2a = std::find_if(s.kernels.begin(), s.kernels.end(),
                                [](const KernelRow& k) { return k.name == "a2a"; });
  REQUIRE(a2a != s.kernels.end());
  CHECK(a2a->count == 2);
  CHECK(a2a->total_s == 1.5);
  CHECK(a2a->exposed_s == 1.0);
}

TEST_CASE("compute on another device hides nothing; totals sum over devices", "[overlap]") {
  Timeline t;
  t.spans = {compute(1, 0, 0, 2), comm(0, 1, 0, 1), comm(1, 1, 1.5, 1)};
  const OverlapSummary s = summarize(t);
  REQUIRE(s.devices.size() == 2);
  CHECK(s.devices[0].comm_exposed_s == 1);
  CHECK(s.devices[0].hidden_fraction == 0);
  CHECK(s.devices[1].comm_exposed_s == 0.5);
  CHECK(s.devices[1].hidden_fraction == 0.5);
  CHECK(s.comm_busy_s == 2);
  CHECK(s.comm_exposed_s == 1.5);
  CHECK(s.hidden_fraction == 0.25);
  CHECK(s.span_s == 2.5);
}

TEST_CASE("a timeline without comm is fully hidden by definition", "[overlap]") {
  Timeline t;
  t.spans = {compute(0, 0, 0, 1)};
  CHECK(summarize(t).hidden_fraction == 1.0);
  CHECK(summarize(Timeline{}).hidden_fraction == 1.0);
  CHECK(summarize(Timeline{}).span_s == 0);
  CHECK(hidden_fraction(0, 0) == 1.0);
}

TEST_CASE("overlap figures equal a cell count and do not depend on span order",
          "[overlap][property]") {
  rc::prop("exposed = cells with comm and no compute, per device", [] {
    const int n = *rc::gen::inRange(0, 40);
    Timeline t;
    std::map<int, std::set<int>> compute_cells, comm_cells;
    for (int i = 0; i < n; ++i) {
      const int device = *rc::gen::inRange(0, 3);
      const int start = *rc::gen::inRange(0, 100);
      const int dur = *rc::gen::inRange(0, 20);
      const Role role = *rc::gen::element(Role::Compute, Role::Comm, Role::Other);
      t.spans.push_back({"k" + std::to_string(i % 4), "cat" + std::to_string(i % 3), double(start),
                         double(dur), device, *rc::gen::inRange(0, 3), role, {}});
      for (int k = start; k < start + dur; ++k) {
        if (role == Role::Compute) compute_cells[device].insert(k);
        if (role == Role::Comm) comm_cells[device].insert(k);
      }
    }
    const OverlapSummary s = summarize(t);
    double exposed_total = 0;
    for (const DeviceOverlap& d : s.devices) {
      std::size_t exposed = 0;
      for (int k : comm_cells[d.device]) exposed += !compute_cells[d.device].count(k);
      RC_ASSERT(d.compute_busy_s == double(compute_cells[d.device].size()));
      RC_ASSERT(d.comm_busy_s == double(comm_cells[d.device].size()));
      RC_ASSERT(d.comm_exposed_s == double(exposed));
      RC_ASSERT(d.hidden_fraction >= 0.0);
      RC_ASSERT(d.hidden_fraction <= 1.0);
      exposed_total += double(exposed);
    }
    RC_ASSERT(s.comm_exposed_s == exposed_total);
    double longest_sum = 0;
    for (const Interval& i : s.longest_exposed) longest_sum += i.duration_s();
    RC_ASSERT(longest_sum <= s.comm_exposed_s);

    Timeline shuffled = t;
    std::mt19937 rng(*rc::gen::arbitrary<unsigned>());
    std::shuffle(shuffled.spans.begin(), shuffled.spans.end(), rng);
    const OverlapSummary s2 = summarize(shuffled);
    RC_ASSERT(s2.comm_exposed_s == s.comm_exposed_s);
    RC_ASSERT(s2.compute_busy_s == s.compute_busy_s);
    RC_ASSERT(s2.span_s == s.span_s);
    RC_ASSERT(s2.kernels.size() == s.kernels.size());
  });
}

TEST_CASE("relative error is signed, zero for equal zeros and absent for a zero measurement",
          "[compare]") {
  CHECK(relative_error(1.25, 1.0) == 0.25);
  CHECK(relative_error(0.75, 1.0) == -0.25);
  CHECK(relative_error(0, 0) == 0.0);
  CHECK_FALSE(relative_error(0.5, 0).has_value());
}

TEST_CASE("compare puts step time, exposed comm, hidden fraction and categories side by side",
          "[compare]") {
  Timeline measured;
  measured.spans = {compute(0, 0, 0, 1), comm(0, 1, 0.5, 1)};  // span 1.5, exposed 0.5
  Timeline predicted;
  predicted.spans = {compute(0, 0, 0, 1), comm(0, 1, 0.75, 1), // span 1.75, exposed 0.75
                     compute(0, 0, 0.25, 0.25, "mtp_post")};
  const Comparison c = compare(predicted, measured);
  std::map<std::string, ComparisonRow> rows;
  for (const auto& r : c.rows) rows[r.metric] = r;
  CHECK(c.rows.front().metric == "step_time_s");
  CHECK(rows.at("step_time_s").predicted == 1.75);
  CHECK(rows.at("step_time_s").measured == 1.5);
  CHECK(*rows.at("step_time_s").relative_error == 0.25 / 1.5);
  CHECK(*rows.at("comm_exposed_s").relative_error == 0.5);
  CHECK(rows.at("hidden_fraction").predicted == 0.25);
  CHECK(rows.at("hidden_fraction").measured == 0.5);
  CHECK(*rows.at("category dispatch exposed_s").relative_error == 0.5);
  CHECK(rows.at("category mlp busy_s").relative_error == 0.0);
  CHECK(rows.at("category mtp_post busy_s").predicted == 0.25);
  CHECK_FALSE(rows.at("category mtp_post busy_s").relative_error.has_value());
  CHECK(rows.count("category mlp exposed_s") == 0);  // compute categories have no exposed row

  const Comparison same = compare(measured, measured);
  for (const auto& r : same.rows) CHECK(r.relative_error == 0.0);
}
