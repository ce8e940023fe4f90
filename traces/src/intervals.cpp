// Interval algebra for the overlap analytics; see intervals.hpp.
#include "ht/traces/intervals.hpp"

#include <algorithm>

namespace ht::traces {

RangeSet unite(std::vector<Range> ranges) {
  std::erase_if(ranges, [](const Range& r) { return !(r.end > r.begin); });
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  RangeSet out;
  for (const Range& r : ranges) {
    // Touching ranges merge too, so a normalized set never has a zero-length gap.
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

RangeSet subtract(const RangeSet& a, const RangeSet& b) {
  RangeSet out;
  std::size_t j = 0;
  for (const Range& r : a) {
    double cursor = r.begin;
    while (j < b.size() && b[j].end <= cursor) ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].begin < r.end) {
      if (b[k].begin > cursor) out.push_back({cursor, b[k].begin});
      cursor = std::max(cursor, b[k].end);
      if (b[k].end > r.end) break;
      ++k;
    }
    if (cursor < r.end) out.push_back({cursor, r.end});
  }
  return out;
}

RangeSet intersect(const RangeSet& a, const RangeSet& b) {
  RangeSet out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].begin, b[j].begin);
    const double hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    if (a[i].end < b[j].end)
      ++i;
    else
      ++j;
  }
  return out;
}

double measure(const RangeSet& set) {
  double total = 0;
  for (const Range& r : set) total += r.length();
  return total;
}

double measure_within(const RangeSet& set, double begin, double end) {
  if (!(end > begin)) return 0;
  auto it = std::upper_bound(set.begin(), set.end(), begin,
                             [](double t, const Range& r) { return t < r.end; });
  double total = 0;
  for (; it != set.end() && it->begin < end; ++it)
    total += std::min(it->end, end) - std::max(it->begin, begin);
  return total;
}

}  // namespace ht::traces
