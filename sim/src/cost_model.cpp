// Compute-node durations for the replay: measured table first, roofline otherwise.
#include "ht/sim/cost_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ht/sim/error.hpp"

namespace ht::sim {

namespace {

[[noreturn]] void fail(const std::string& message) { throw SimError(SimErrorCode::BadCosts, message); }

double checked(std::string_view key, double v, double min) {
  if (!std::isfinite(v) || v < min)
    fail("'" + std::string(key) + "' must be a finite number >= " + std::to_string(min) + ", got " +
         std::to_string(v));
  return v;
}

double number_field(const nlohmann::json& j, std::string_view key) {
  if (!j.is_number()) fail("'" + std::string(key) + "' must be a number");
  return j.get<double>();
}

}  // namespace

const double* CostModel::measured_for(const schedule::Node& node) const {
  if (measured_s.empty()) return nullptr;
  const std::string slot(schedule::to_string(node.slot));
  const std::string phase(schedule::to_string(node.phase));
  for (const std::string& key : {slot + "/" + phase + "/" + node.symbols, slot + "/" + phase, slot}) {
    if (auto it = measured_s.find(key); it != measured_s.end()) return &it->second;
  }
  return nullptr;
}

double CostModel::compute_seconds(const schedule::Node& node, const GpuSpec& gpu) const {
  if (const double* m = measured_for(node)) return *m;
  if (node.flops <= 0 && node.mem_bytes <= 0) return 0;  // an empty slot launches nothing
  const double math = node.flops / (gpu.peak_flops * gpu.flops_efficiency);
  const double memory = node.mem_bytes / (gpu.hbm_bytes_per_s * gpu.hbm_efficiency);
  return std::max(math, memory) + launch_overhead_s;
}

void set_cost_key(CostModel& model, std::string_view key, std::string_view value) {
  double v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size())
    fail("value of '" + std::string(key) + "' is not a number: '" + std::string(value) + "'");
  if (key == "launch_overhead_us") model.launch_overhead_s = checked(key, v, 0) * 1e-6;
  else if (key == "comm_launch_us") model.comm_launch_s = checked(key, v, 0) * 1e-6;
  else if (key == "interference_factor") model.interference_factor = checked(key, v, 1);
  else
    fail("unknown cost key '" + std::string(key) +
         "' (known: launch_overhead_us, comm_launch_us, interference_factor)");
}

CostModel parse_costs_json(std::string_view json_text, CostModel base) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) fail("the cost file must hold a JSON object");
  for (const auto& [key, value] : j.items()) {
    if (key == "launch_overhead_us" || key == "comm_launch_us" || key == "interference_factor") {
      std::ostringstream text;
      text.precision(17);
      text << number_field(value, key);
      set_cost_key(base, key, text.str());
    } else if (key == "durations_us") {
      if (!value.is_object()) fail("'durations_us' must map \"slot[/phase[/symbols]]\" to microseconds");
      for (const auto& [node_kind, us] : value.items())
        base.measured_s[node_kind] = checked(node_kind, number_field(us, node_kind), 0) * 1e-6;
    } else if (key.empty() || key.front() != '_') {  // "_comment" and friends are allowed
      fail("unknown field '" + key + "' (known: launch_overhead_us, comm_launch_us, interference_factor, durations_us)");
    }
  }
  return base;
}

CostModel load_costs_file(const std::string& path, CostModel base) {
  std::ifstream in(path);
  if (!in) fail("cannot read '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_costs_json(text.str(), std::move(base));
  } catch (const SimError& e) {
    fail(path + ": " + e.detail());
  }
}

}  // namespace ht::sim
