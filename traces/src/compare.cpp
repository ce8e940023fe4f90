// Predicted vs measured; see compare.hpp.
#include "ht/traces/compare.hpp"

#include <cmath>
#include <map>

namespace ht::traces {

std::optional<double> relative_error(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? std::optional<double>(0.0) : std::nullopt;
  return (predicted - measured) / std::fabs(measured);
}

Comparison compare(const Timeline& predicted, const Timeline& measured) {
  Comparison c;
  c.predicted = summarize(predicted);
  c.measured = summarize(measured);
  auto row = [&](std::string metric, double p, double m) {
    c.rows.push_back({std::move(metric), p, m, relative_error(p, m)});
  };
  row("step_time_s", c.predicted.span_s, c.measured.span_s);
  row("compute_busy_s", c.predicted.compute_busy_s, c.measured.compute_busy_s);
  row("comm_busy_s", c.predicted.comm_busy_s, c.measured.comm_busy_s);
  row("comm_exposed_s", c.predicted.comm_exposed_s, c.measured.comm_exposed_s);
  row("hidden_fraction", c.predicted.hidden_fraction, c.measured.hidden_fraction);

  std::map<std::string, std::pair<const CategoryRow*, const CategoryRow*>> cats;
  for (const CategoryRow& r : c.predicted.categories) cats[r.category].first = &r;
  for (const CategoryRow& r : c.measured.categories) cats[r.category].second = &r;
  for (const auto& [name, pair] : cats) {
    const auto [p, m] = pair;
    row("category " + name + " busy_s", p ? p->busy_s : 0, m ? m->busy_s : 0);
    const bool comm = (p && p->role == Role::Comm) || (m && m->role == Role::Comm);
    if (comm) row("category " + name + " exposed_s", p ? p->exposed_s : 0, m ? m->exposed_s : 0);
  }
  return c;
}

}  // namespace ht::traces
