// Tables and JSON for `hybrid-twin trace`; see report.hpp.
#include "ht/traces/report.hpp"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "ht/traces/units.hpp"

namespace ht::traces {

namespace {

using json = nlohmann::json;

json summary_json(const OverlapSummary& s) {
  json j;
  j["span_s"] = s.span_s;
  j["compute_busy_s"] = s.compute_busy_s;
  j["comm_busy_s"] = s.comm_busy_s;
  j["comm_exposed_s"] = s.comm_exposed_s;
  j["hidden_fraction"] = s.hidden_fraction;
  j["spans"] = s.spans;
  j["devices"] = json::array();
  for (const DeviceOverlap& d : s.devices)
    j["devices"].push_back({{"device", d.device},
                            {"spans", d.spans},
                            {"span_s", d.span_s},
                            {"compute_busy_s", d.compute_busy_s},
                            {"comm_busy_s", d.comm_busy_s},
                            {"comm_exposed_s", d.comm_exposed_s},
                            {"hidden_fraction", d.hidden_fraction}});
  j["longest_exposed"] = json::array();
  for (const Interval& i : s.longest_exposed)
    j["longest_exposed"].push_back({{"device", i.device},
                                    {"start_s", i.start_s},
                                    {"end_s", i.end_s},
                                    {"duration_s", i.duration_s()}});
  j["kernels"] = json::array();
  for (const KernelRow& k : s.kernels)
    j["kernels"].push_back({{"name", k.name},
                            {"role", std::string(to_string(k.role))},
                            {"count", k.count},
                            {"total_s", k.total_s},
                            {"exposed_s", k.exposed_s}});
  j["categories"] = json::array();
  for (const CategoryRow& c : s.categories)
    j["categories"].push_back({{"category", c.category},
                               {"role", std::string(to_string(c.role))},
                               {"count", c.count},
                               {"total_s", c.total_s},
                               {"busy_s", c.busy_s},
                               {"exposed_s", c.exposed_s}});
  return j;
}

std::string dump(const json& j) {
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string pad(std::string s, std::size_t width, bool right = true) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %%", 100 * fraction);
  return buf;
}

std::string shorten(const std::string& name, std::size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

}  // namespace

std::string summary_to_json(const OverlapSummary& summary) { return dump(summary_json(summary)); }

std::string comparison_to_json(const Comparison& c) {
  json j;
  j["rows"] = json::array();
  for (const ComparisonRow& r : c.rows)
    j["rows"].push_back({{"metric", r.metric},
                         {"predicted", r.predicted},
                         {"measured", r.measured},
                         {"relative_error", r.relative_error ? json(*r.relative_error) : json()}});
  j["predicted"] = summary_json(c.predicted);
  j["measured"] = summary_json(c.measured);
  return dump(j);
}

std::string summary_table(const OverlapSummary& s, std::size_t max_kernels) {
  std::string out;
  out += "span " + format_seconds(s.span_s) + ", " + std::to_string(s.spans) + " spans on " +
         std::to_string(s.devices.size()) + " devices\n\n";
  out += pad("device", 8) + pad("spans", 10) + pad("span", 14) + pad("compute busy", 16) +
         pad("comm busy", 14) + pad("exposed comm", 16) + pad("hidden", 10) + "\n";
  auto line = [&](const std::string& label, std::size_t spans, double span, double compute,
                  double comm, double exposed, double hidden) {
    out += pad(label, 8) + pad(std::to_string(spans), 10) + pad(format_seconds(span), 14) +
           pad(format_seconds(compute), 16) + pad(format_seconds(comm), 14) +
           pad(format_seconds(exposed), 16) + pad(percent(hidden), 10) + "\n";
  };
  for (const DeviceOverlap& d : s.devices)
    line(std::to_string(d.device), d.spans, d.span_s, d.compute_busy_s, d.comm_busy_s,
         d.comm_exposed_s, d.hidden_fraction);
  line("total", s.spans, s.span_s, s.compute_busy_s, s.comm_busy_s, s.comm_exposed_s,
       s.hidden_fraction);

  if (!s.longest_exposed.empty()) {
    out += "\nlongest exposed comm intervals\n" + pad("device", 8) + pad("start", 16) +
           pad("duration", 14) + "\n";
    for (const Interval& i : s.longest_exposed)
      out += pad(std::to_string(i.device), 8) + pad(format_seconds(i.start_s), 16) +
             pad(format_seconds(i.duration_s()), 14) + "\n";
  }
  if (!s.categories.empty()) {
    out += "\n" + pad("category", 24, false) + pad("role", 9) + pad("count", 10) +
           pad("total", 14) + pad("busy", 14) + pad("exposed", 14) + "\n";
    for (const CategoryRow& c : s.categories)
      out += pad(shorten(c.category, 23), 24, false) + pad(std::string(to_string(c.role)), 9) +
             pad(std::to_string(c.count), 10) + pad(format_seconds(c.total_s), 14) +
             pad(format_seconds(c.busy_s), 14) + pad(format_seconds(c.exposed_s), 14) + "\n";
  }
  if (!s.kernels.empty()) {
    out += "\n" + pad("kernel", 60, false) + pad("role", 9) + pad("count", 10) + pad("total", 14) +
           pad("exposed", 14) + "\n";
    for (std::size_t i = 0; i < s.kernels.size() && i < max_kernels; ++i) {
      const KernelRow& k = s.kernels[i];
      out += pad(shorten(k.name, 59), 60, false) + pad(std::string(to_string(k.role)), 9) +
             pad(std::to_string(k.count), 10) + pad(format_seconds(k.total_s), 14) +
             pad(k.role == Role::Comm ? format_seconds(k.exposed_s) : "-", 14) + "\n";
    }
    if (s.kernels.size() > max_kernels)
      out += "(" + std::to_string(s.kernels.size() - max_kernels) + " more kernels; --json lists all)\n";
  }
  return out;
}

std::string comparison_table(const Comparison& c) {
  std::string out = pad("metric", 40, false) + pad("predicted", 16) + pad("measured", 16) +
                    pad("rel. error", 12) + "\n";
  for (const ComparisonRow& r : c.rows) {
    const bool fraction = r.metric == "hidden_fraction";
    auto cell = [&](double v) { return fraction ? percent(v) : format_seconds(v); };
    std::string err = "n/a";
    if (r.relative_error) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%+.1f %%", 100 * *r.relative_error);
      err = buf;
    }
    out += pad(shorten(r.metric, 39), 40, false) + pad(cell(r.predicted), 16) +
           pad(cell(r.measured), 16) + pad(err, 12) + "\n";
  }
  return out;
}

}  // namespace ht::traces
