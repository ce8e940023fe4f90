#include "ht/sim/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "ht/schedule/atomic_file.hpp"
#include "ht/sim/error.hpp"

namespace ht::sim {
namespace {

[[noreturn]] void fail(const std::string& message) { throw SimError(SimErrorCode::BadCosts, "calibrate: " + message); }

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

const std::string* arg(const traces::Span& s, const std::string& key) {
  const auto it = s.args.find(key);
  return it == s.args.end() ? nullptr : &it->second;
}

double metadata_number(const traces::Timeline& t, const std::string& key) {
  const auto it = t.metadata.find(key);
  if (it == t.metadata.end()) return 0;
  try {
    const double v = std::stod(it->second);
    if (!std::isfinite(v) || v < 0) fail("metadata " + key + " = '" + it->second + "' is not a non-negative number");
    return v;
  } catch (const std::logic_error&) {
    fail("metadata " + key + " = '" + it->second + "' is not a number");
  }
}

std::string text(double v) {
  std::ostringstream o;
  o.precision(12);
  o << v;
  return o.str();
}

}  // namespace

Calibration calibrate(const traces::Timeline& measured) {
  Calibration c;
  if (auto it = measured.metadata.find("pattern"); it != measured.metadata.end()) c.pattern = it->second;
  if (auto it = measured.metadata.find("schedule"); it != measured.metadata.end()) c.schedule = it->second;

  std::map<std::string, std::vector<double>> compute;
  int devices = 0;
  for (const auto& s : measured.spans) {
    devices = std::max(devices, s.device + 1);
    if (s.role != traces::Role::Compute || s.category.empty()) continue;
    const std::string* phase = arg(s, "phase");
    if (!phase) continue;
    const std::string* symbols = arg(s, "symbols");
    compute[s.category + "/" + *phase + (symbols ? "/" + *symbols : "")].push_back(s.duration_s);
  }
  if (compute.empty())
    fail("the trace has no compute span with plan-node arguments (category = slot, args.phase); "
         "record one with `hybrid-twin train ... --trace FILE`");
  for (auto& [key, d] : compute) {
    FitRow row{key, static_cast<int>(d.size()), mean(d), *std::min_element(d.begin(), d.end()),
               *std::max_element(d.begin(), d.end())};
    c.costs.measured_s[key] = row.mean_s;
    c.rows.push_back(std::move(row));
  }
  c.costs.launch_overhead_s = 0;  // measured durations already include every launch

  // The link the measurement ran on.
  const double gbps = metadata_number(measured, "link.bandwidth_gbps");
  const double latency_us = metadata_number(measured, "link.latency_us");
  const double bytes_per_s = gbps > 0 ? gbps * 1e9 : 1e15;  // throttle off: effectively free
  c.platform = "dgx-h100:gpus_per_node=" + std::to_string(std::max(8, devices)) + ",nvlink_gbps=" +
               text(bytes_per_s / 1e9) + ",nvlink_efficiency=1,nvlink_latency_us=" + text(latency_us);

  // Comm overhead beyond the modelled link time, per all-to-all instance.
  using Instance = std::tuple<std::string, std::string, std::string, std::string>;  // slot, phase, layer, mb
  std::map<Instance, std::vector<double>> excess;
  for (const auto& s : measured.spans) {
    if (s.role != traces::Role::Comm || (s.category != "dispatch" && s.category != "combine")) continue;
    const std::string *phase = arg(s, "phase"), *layer = arg(s, "layer"), *mb = arg(s, "microbatch"),
                      *bytes = arg(s, "bytes");
    if (!phase || !layer || !mb || !bytes) continue;
    double b = 0;
    try {
      b = std::stod(*bytes);
    } catch (const std::logic_error&) {
      fail("span '" + s.name + "' has bytes = '" + *bytes + "'");
    }
    const double link = (devices - 1) * latency_us * 1e-6 + b / bytes_per_s;
    const double e = std::max(0.0, s.duration_s - link);
    excess[Instance{s.category, *phase, *layer, *mb}].push_back(e);
  }
  std::vector<double> ex;
  for (const auto& [key, e] : excess) ex.push_back(mean(e));
  c.comm_samples = static_cast<int>(ex.size());
  c.costs.comm_launch_s = mean(ex);
  return c;
}

std::string calibration_to_json(const Calibration& c) {
  nlohmann::ordered_json j;
  j["_source"] = "hybrid-twin calibrate";
  if (!c.pattern.empty()) j["_pattern"] = c.pattern;
  if (!c.schedule.empty()) j["_schedule"] = c.schedule;
  j["_platform"] = c.platform;
  j["launch_overhead_us"] = c.costs.launch_overhead_s * 1e6;
  j["comm_launch_us"] = c.costs.comm_launch_s * 1e6;
  j["interference_factor"] = c.costs.interference_factor;
  nlohmann::ordered_json d = nlohmann::ordered_json::object(), fit = nlohmann::ordered_json::object();
  for (const auto& r : c.rows) {
    d[r.key] = r.mean_s * 1e6;
    fit[r.key] = {{"samples", r.samples}, {"min_us", r.min_s * 1e6}, {"max_us", r.max_s * 1e6}};
  }
  j["durations_us"] = d;
  j["_fit"] = fit;
  return j.dump(2) + "\n";
}

void save_calibration(const Calibration& calibration, const std::string& path) {
  schedule::detail::write_file_atomically(path, calibration_to_json(calibration));
}

}  // namespace ht::sim
