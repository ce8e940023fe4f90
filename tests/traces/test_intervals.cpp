// Interval algebra (intervals.hpp) against hand cases and, as a property, against a brute-force
// count of unit cells on an integer grid.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <set>

#include "ht/traces/intervals.hpp"

using namespace ht::traces;

TEST_CASE("unite merges overlapping and touching ranges and drops empty ones", "[intervals]") {
  const RangeSet u = unite({{5, 7}, {1, 3}, {2, 4}, {4, 4.5}, {9, 9}, {8, 6}});
  REQUIRE(u == RangeSet{{1, 4.5}, {5, 7}});
  CHECK(measure(u) == 5.5);
}

TEST_CASE("subtract removes covered parts and keeps the gaps", "[intervals]") {
  const RangeSet a = {{0, 10}, {20, 30}};
  const RangeSet b = {{2, 3}, {5, 22}, {25, 26}, {29, 40}};
  REQUIRE(subtract(a, b) == RangeSet{{0, 2}, {3, 5}, {22, 25}, {26, 29}});
  REQUIRE(subtract(a, {}) == a);
  REQUIRE(subtract({}, b).empty());
}

TEST_CASE("intersect keeps what both sets cover", "[intervals]") {
  REQUIRE(intersect({{0, 10}, {20, 30}}, {{5, 25}}) == RangeSet{{5, 10}, {20, 25}});
}

TEST_CASE("measure_within counts the covered part of a window", "[intervals]") {
  const RangeSet s = {{1, 3}, {5, 9}};
  CHECK(measure_within(s, 0, 10) == 6);
  CHECK(measure_within(s, 2, 6) == 2);
  CHECK(measure_within(s, 3, 5) == 0);
  CHECK(measure_within(s, 8, 8) == 0);
}

namespace {
// Brute force on the integer grid: the set of unit cells [k, k+1) covered by the ranges.
std::set<int> cells(const std::vector<std::pair<int, int>>& ranges) {
  std::set<int> out;
  for (auto [a, b] : ranges)
    for (int k = a; k < b; ++k) out.insert(k);
  return out;
}
std::vector<Range> to_ranges(const std::vector<std::pair<int, int>>& ranges) {
  std::vector<Range> out;
  for (auto [a, b] : ranges) out.push_back({double(a), double(b)});
  return out;
}
rc::Gen<std::vector<std::pair<int, int>>> gen_ranges() {
  return rc::gen::container<std::vector<std::pair<int, int>>>(
      rc::gen::map(rc::gen::pair(rc::gen::inRange(0, 60), rc::gen::inRange(0, 15)),
                   [](std::pair<int, int> p) { return std::make_pair(p.first, p.first + p.second); }));
}
}  // namespace

TEST_CASE("union, difference and intersection agree with a cell count", "[intervals][property]") {
  rc::prop("measures equal brute-force cell counts", [] {
    const auto a = *gen_ranges();
    const auto b = *gen_ranges();
    const std::set<int> ca = cells(a), cb = cells(b);
    std::set<int> diff, both;
    for (int k : ca) (cb.count(k) ? both : diff).insert(k);
    const RangeSet ua = unite(to_ranges(a)), ub = unite(to_ranges(b));
    RC_ASSERT(measure(ua) == double(ca.size()));
    RC_ASSERT(measure(subtract(ua, ub)) == double(diff.size()));
    RC_ASSERT(measure(intersect(ua, ub)) == double(both.size()));
    for (std::size_t i = 1; i < ua.size(); ++i) RC_ASSERT(ua[i - 1].end < ua[i].begin);
    const int lo = *rc::gen::inRange(0, 80);
    const int hi = lo + *rc::gen::inRange(0, 30);
    std::size_t inside = 0;
    for (int k : ca) inside += (k >= lo && k < hi);
    RC_ASSERT(measure_within(ua, lo, hi) == double(inside));
  });
}
