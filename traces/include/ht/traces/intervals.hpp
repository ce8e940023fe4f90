// Interval algebra on one device's time axis: the union / difference / intersection of span
// sets that the overlap analytics (overlap.hpp) are built from. Ranges are half-open [begin, end)
// in seconds; "normalized" means sorted, disjoint, non-touching and non-empty.
#pragma once

#include <utility>
#include <vector>

namespace ht::traces {

struct Range {
  double begin = 0;
  double end = 0;
  double length() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

using RangeSet = std::vector<Range>;  // normalized when produced by the functions below

// Union of arbitrary ranges (any order, overlapping, empty ones dropped).
RangeSet unite(std::vector<Range> ranges);
// Parts of a that are not covered by b (both normalized).
RangeSet subtract(const RangeSet& a, const RangeSet& b);
// Parts covered by both a and b (both normalized).
RangeSet intersect(const RangeSet& a, const RangeSet& b);
// Total length of a normalized set.
double measure(const RangeSet& set);
// Length of [begin, end) covered by a normalized set; O(log n + k).
double measure_within(const RangeSet& set, double begin, double end);

}  // namespace ht::traces
