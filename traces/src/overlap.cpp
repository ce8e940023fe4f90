// Overlap analytics; see overlap.hpp. Everything is computed per device from interval sets, so
// spans may arrive in any order and on any number of streams.
#include "ht/traces/overlap.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "ht/traces/intervals.hpp"

namespace ht::traces {

double hidden_fraction(double comm_exposed_s, double comm_busy_s) {
  return comm_busy_s > 0 ? 1.0 - comm_exposed_s / comm_busy_s : 1.0;
}

OverlapSummary summarize(const Timeline& timeline) { return summarize(timeline, SummaryOptions{}); }

OverlapSummary summarize(const Timeline& timeline, const SummaryOptions& options) {
  OverlapSummary out;
  out.spans = timeline.spans.size();

  std::map<int, std::vector<const Span*>> by_device;
  for (const Span& s : timeline.spans) by_device[s.device].push_back(&s);

  std::map<std::pair<std::string, Role>, KernelRow> kernels;
  struct CategoryAcc {
    CategoryRow row;
    bool has_comm = false;
  };
  std::map<std::string, CategoryAcc> categories;
  std::vector<Interval> exposed_all;
  bool any = false;
  double first = 0, last = 0;

  for (const auto& [device, spans] : by_device) {
    DeviceOverlap d;
    d.device = device;
    d.spans = spans.size();
    std::vector<Range> compute, comm;
    std::map<std::string, std::vector<Range>> cat_all, cat_comm;
    double dfirst = spans.front()->start_s, dlast = spans.front()->end_s();
    for (const Span* s : spans) {
      dfirst = std::min(dfirst, s->start_s);
      dlast = std::max(dlast, s->end_s());
      const Range r{s->start_s, s->end_s()};
      if (s->role == Role::Compute) compute.push_back(r);
      if (s->role == Role::Comm) {
        comm.push_back(r);
        cat_comm[s->category].push_back(r);
      }
      cat_all[s->category].push_back(r);
    }
    const RangeSet compute_set = unite(std::move(compute));
    const RangeSet comm_set = unite(std::move(comm));
    const RangeSet exposed = subtract(comm_set, compute_set);
    d.span_s = dlast - dfirst;
    d.compute_busy_s = measure(compute_set);
    d.comm_busy_s = measure(comm_set);
    d.comm_exposed_s = measure(exposed);
    d.hidden_fraction = hidden_fraction(d.comm_exposed_s, d.comm_busy_s);
    for (const Range& r : exposed) exposed_all.push_back({device, r.begin, r.end});

    for (const Span* s : spans) {
      KernelRow& k = kernels[{s->name, s->role}];
      k.name = s->name;
      k.role = s->role;
      ++k.count;
      k.total_s += s->duration_s;
      if (s->role == Role::Comm) k.exposed_s += measure_within(exposed, s->start_s, s->end_s());
      CategoryAcc& c = categories[s->category];
      c.row.category = s->category;
      ++c.row.count;
      c.row.total_s += s->duration_s;
      c.has_comm = c.has_comm || s->role == Role::Comm;
    }
    for (auto& [name, ranges] : cat_all) categories[name].row.busy_s += measure(unite(std::move(ranges)));
    for (auto& [name, ranges] : cat_comm)
      categories[name].row.exposed_s += measure(intersect(unite(std::move(ranges)), exposed));

    if (!any) first = dfirst, last = dlast;
    first = std::min(first, dfirst);
    last = std::max(last, dlast);
    any = true;
    out.compute_busy_s += d.compute_busy_s;
    out.comm_busy_s += d.comm_busy_s;
    out.comm_exposed_s += d.comm_exposed_s;
    out.devices.push_back(d);
  }
  out.span_s = any ? last - first : 0;
  out.hidden_fraction = hidden_fraction(out.comm_exposed_s, out.comm_busy_s);

  std::sort(exposed_all.begin(), exposed_all.end(), [](const Interval& a, const Interval& b) {
    return std::make_tuple(-a.duration_s(), a.device, a.start_s) <
           std::make_tuple(-b.duration_s(), b.device, b.start_s);
  });
  if (exposed_all.size() > options.longest) exposed_all.resize(options.longest);
  out.longest_exposed = std::move(exposed_all);

  for (auto& [key, row] : kernels) out.kernels.push_back(std::move(row));
  std::stable_sort(out.kernels.begin(), out.kernels.end(),
                   [](const KernelRow& a, const KernelRow& b) { return a.total_s > b.total_s; });
  for (auto& [name, acc] : categories) {
    acc.row.role = acc.has_comm ? Role::Comm : Role::Compute;
    out.categories.push_back(std::move(acc.row));
  }
  return out;
}

double weight_gemm_share(const Timeline& timeline) {
  double backward = 0, weight = 0;
  for (const auto& span : timeline.spans) {
    const auto f = span.args.find("gemm_flops"), phase = span.args.find("phase");
    if (f == span.args.end() || phase == span.args.end()) continue;
    if (phase->second == "weight") weight += std::stod(f->second);
    if (phase->second == "backward") backward += std::stod(f->second);
  }
  return backward + weight > 0 ? weight / (backward + weight) : 0;
}

}  // namespace ht::traces
