#include "ht/sim/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "ht/io/error.hpp"
#include "ht/io/output_file.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/replay.hpp"

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

std::string meta_text(const traces::Timeline& t, const std::string& key) {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? "" : it->second;
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

double number(const traces::Span& s, const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::logic_error&) {
  }
  fail("span '" + s.name + "' has " + key + " = '" + value + "', not a non-negative number");
}

// "peer:bytes;peer:bytes" (the executor's args.sent_bytes) -> transfers.
std::vector<schedule::Transfer> parse_sent(const traces::Span& s, const std::string& value) {
  std::vector<schedule::Transfer> out;
  std::size_t at = 0;
  while (at < value.size()) {
    const std::size_t end = std::min(value.find(';', at), value.size());
    const std::string item = value.substr(at, end - at);
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) fail("span '" + s.name + "' has sent_bytes item '" + item + "', not peer:bytes");
    out.push_back({static_cast<int>(number(s, "sent_bytes peer", item.substr(0, colon))),
                   number(s, "sent_bytes", item.substr(colon + 1))});
    at = end + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// The wake-up latency of a blocked stream: the median gap between a node and the next node of
// its microbatch chain (same rank, microbatch and model chunk) on the other stream, counted only
// where that node's stream was idle before (so the gap is the hand-off alone, not queueing).
double wake_latency(const traces::Timeline& t) {
  using Chain = std::tuple<int, std::string, std::string>;  // device, microbatch, vp_stage
  std::map<Chain, std::vector<const traces::Span*>> chains;
  std::map<std::pair<int, int>, std::vector<const traces::Span*>> streams;
  for (const auto& s : t.spans) {
    const std::string *mb = arg(s, "microbatch"), *vp = arg(s, "vp_stage");
    if (!mb || *mb == "-1") continue;
    chains[Chain{s.device, *mb, vp ? *vp : "0"}].push_back(&s);
    streams[{s.device, s.stream}].push_back(&s);
  }
  const auto by_start = [](const traces::Span* a, const traces::Span* b) { return a->start_s < b->start_s; };
  std::map<const traces::Span*, double> stream_free;  // end of the previous span on the same stream
  for (auto& [key, v] : streams) {
    std::sort(v.begin(), v.end(), by_start);
    for (std::size_t i = 1; i < v.size(); ++i) stream_free[v[i]] = v[i - 1]->start_s + v[i - 1]->duration_s;
  }
  std::vector<double> gaps;
  for (auto& [key, v] : chains) {
    std::sort(v.begin(), v.end(), by_start);
    for (std::size_t i = 1; i < v.size(); ++i) {
      const traces::Span &a = *v[i - 1], &b = *v[i];
      if (a.stream == b.stream) continue;
      const double ready = a.start_s + a.duration_s;
      const auto free = stream_free.find(&b);
      if (free != stream_free.end() && free->second > ready) continue;  // b queued behind its stream
      if (b.start_s >= ready) gaps.push_back(b.start_s - ready);
    }
  }
  return median(std::move(gaps));
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
  const int host_cores = static_cast<int>(metadata_number(measured, "host.cores"));
  c.cpu_work = host_cores > 0;

  // The work of a span: its duration, or on the CPU backend the CPU time its thread spent on it.
  const auto work_of = [&](const traces::Span& s) {
    if (!c.cpu_work) return s.duration_s;
    const std::string* cpu = arg(s, "cpu_us");
    return cpu ? number(s, "cpu_us", *cpu) * 1e-6 : s.duration_s;
  };
  const auto instance = [&](const traces::Span& s) -> MeasuredInstance& {
    return c.costs.instances[std::to_string(s.device) + "/" + s.name];
  };

  struct Sample {
    double work = 0;
    double rows = -1;
    double flops = -1;  // the node's planned FLOPs (args.flops)
  };
  std::map<std::string, std::vector<Sample>> compute;
  int devices = 0;
  for (const auto& s : measured.spans) {
    devices = std::max(devices, s.device + 1);
    if (s.role != traces::Role::Compute || s.category.empty()) continue;
    const std::string* phase = arg(s, "phase");
    if (!phase) continue;
    const std::string* symbols = arg(s, "symbols");
    Sample sample{work_of(s), -1, -1};
    if (const std::string* flops = arg(s, "flops")) sample.flops = number(s, "flops", *flops);
    if (const std::string* rows = arg(s, "rows")) {
      sample.rows = number(s, "rows", *rows);
      instance(s).rows = static_cast<int>(sample.rows);
    }
    compute[s.category + "/" + *phase + (symbols ? "/" + *symbols : "")].push_back(sample);
  }
  if (compute.empty())
    fail("the trace has no compute span with plan-node arguments (category = slot, args.phase); "
         "record one with `hybrid-twin train ... --trace FILE`");
  for (auto& [key, samples] : compute) {
    std::vector<double> w;
    for (const auto& x : samples) w.push_back(x.work);
    FitRow row{key, static_cast<int>(w.size()), mean(w), *std::min_element(w.begin(), w.end()),
               *std::max_element(w.begin(), w.end())};
    // Least-squares slope of work over rows, when every sample knows its rows and they vary.
    if (std::all_of(samples.begin(), samples.end(), [](const Sample& x) { return x.rows >= 0; })) {
      double mr = 0;
      for (const auto& x : samples) mr += x.rows;
      mr /= static_cast<double>(samples.size());
      double sxy = 0, sxx = 0;
      for (const auto& x : samples) {
        sxy += (x.rows - mr) * (x.work - row.mean_s);
        sxx += (x.rows - mr) * (x.rows - mr);
      }
      if (sxx > 0) {
        row.scaled = true;
        row.per_row_s = sxy / sxx;
        row.mean_rows = mr;
        c.costs.row_scaling[key] = {row.per_row_s, row.mean_rows};
      }
    }
    c.costs.measured_s[key] = row.mean_s;
    // Backward and W entries keep the planned FLOPs they were measured on (cost_model.hpp:
    // delayed wgrad prices B and W by their shares of them).
    const bool backward_like = key.find("/backward") != std::string::npos || key.find("/weight") != std::string::npos;
    if (backward_like && std::all_of(samples.begin(), samples.end(), [](const Sample& x) { return x.flops > 0; })) {
      double f = 0;
      for (const auto& x : samples) f += x.flops;
      c.costs.measured_flops[key] = f / static_cast<double>(samples.size());
    }
    c.rows.push_back(std::move(row));
  }
  c.costs.launch_overhead_s = 0;  // measured durations already include every launch
  c.costs.wake_latency_s = wake_latency(measured);

  // The link the measurement ran on.
  const double gbps = metadata_number(measured, "link.bandwidth_gbps");
  const double latency_us = metadata_number(measured, "link.latency_us");
  const double bytes_per_s = gbps > 0 ? gbps * 1e9 : 1e15;  // throttle off: effectively free
  if (c.cpu_work)
    c.platform = "cpu-ranks:nvlink_gbps=" + text(bytes_per_s / 1e9) + ",nvlink_latency_us=" + text(latency_us) +
                 ",host_cores=" + std::to_string(host_cores) +
                 (meta_text(measured, "host.comm_priority") == "normal" ? ",comm_priority=0" : "");
  else
    c.platform = "dgx-h100:gpus_per_node=" + std::to_string(std::max(8, devices)) + ",nvlink_gbps=" +
                 text(bytes_per_s / 1e9) + ",nvlink_efficiency=1,nvlink_latency_us=" + text(latency_us);

  // Per all-to-all instance: the comm stream's own work (CPU backend) or the excess beyond the
  // modelled link time; and the bytes each member sent to each peer.
  using Instance = std::tuple<std::string, std::string, std::string, std::string>;  // slot, phase, layer, mb
  std::map<Instance, std::vector<double>> overhead;
  // CPU backend: each comm span's host work, split at the first collective (args.pre_cpu_us).
  std::map<std::string, std::vector<CommWork>> comm_work;
  for (const auto& s : measured.spans) {
    if (s.role != traces::Role::Comm) continue;
    if (const std::string* phase = arg(s, "phase"); c.cpu_work && phase && arg(s, "cpu_us")) {
      const double total = work_of(s);
      const std::string* pre = arg(s, "pre_cpu_us");
      const double before = pre ? std::min(total, number(s, "pre_cpu_us", *pre) * 1e-6) : 0;
      comm_work[s.category + "/" + *phase].push_back({before, total - before});
    }
    if (s.category != "dispatch" && s.category != "combine") continue;
    const std::string *phase = arg(s, "phase"), *layer = arg(s, "layer"), *mb = arg(s, "microbatch"),
                      *bytes = arg(s, "bytes");
    if (!phase || !layer || !mb || !bytes) continue;
    double b = 0;
    if (const std::string* sent = arg(s, "sent_bytes")) {
      MeasuredInstance& inst = instance(s);
      inst.has_sends = true;
      inst.sends = parse_sent(s, *sent);
      for (const auto& t : inst.sends) b += t.bytes;
    } else {
      b = number(s, "bytes", *bytes);
    }
    double e = 0;
    if (c.cpu_work && arg(s, "cpu_us")) {
      e = work_of(s);
    } else {
      const double link = (devices - 1) * latency_us * 1e-6 + b / bytes_per_s;
      e = std::max(0.0, s.duration_s - link);
    }
    overhead[Instance{s.category, *phase, *layer, *mb}].push_back(e);
  }
  c.comm_samples = static_cast<int>(overhead.size());
  if (c.cpu_work) {
    // The comm stream's CPU work per slot/phase (comm_work_s), before and after the transfers.
    for (const auto& [key, w] : comm_work) {
      CommWork m;
      for (const auto& x : w) {
        m.before_s += x.before_s / static_cast<double>(w.size());
        m.after_s += x.after_s / static_cast<double>(w.size());
      }
      c.costs.comm_work_s[key] = m;
    }
    c.costs.comm_launch_s = 0;
  } else {
    std::vector<double> ex;
    for (const auto& [key, e] : overhead) ex.push_back(mean(e));
    c.costs.comm_launch_s = mean(ex);
  }
  return c;
}

double fit_wake_latency(const schedule::Plan& plan, const PlatformSpec& platform, CostModel costs, double step_s,
                        double* replayed_s) {
  ReplayOptions options;
  options.keep_timeline = false;
  const auto replayed = [&](double latency) {
    costs.wake_latency_s = latency;
    return replay(plan, platform, costs, options).summary.step_time_s;
  };
  double lo = 0, hi = 5e-3;
  double at_lo = replayed(lo);
  if (at_lo >= step_s) {  // the twin is already as slow as the run without any hand-off cost
    if (replayed_s) *replayed_s = at_lo;
    return 0;
  }
  if (replayed(hi) <= step_s) lo = hi;
  while (hi - lo > 0.5e-6 && lo < hi) {
    const double mid = (lo + hi) / 2;
    (replayed(mid) < step_s ? lo : hi) = mid;
  }
  if (replayed_s) *replayed_s = replayed(lo);
  return lo;
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
  j["wake_latency_us"] = c.costs.wake_latency_s * 1e6;
  if (!c.costs.comm_work_s.empty()) {
    nlohmann::ordered_json w = nlohmann::ordered_json::object();
    for (const auto& [key, cw] : c.costs.comm_work_s) w[key] = {{"before", cw.before_s * 1e6}, {"after", cw.after_s * 1e6}};
    j["comm_work_us"] = w;
  }
  if (c.cpu_work) j["_work"] = "thread CPU time per span (CPU backend; the twin shares host_cores among ranks)";
  nlohmann::ordered_json d = nlohmann::ordered_json::object(), fit = nlohmann::ordered_json::object(),
                         rows = nlohmann::ordered_json::object();
  for (const auto& r : c.rows) {
    d[r.key] = r.mean_s * 1e6;
    fit[r.key] = {{"samples", r.samples}, {"min_us", r.min_s * 1e6}, {"max_us", r.max_s * 1e6}};
    if (r.scaled) rows[r.key] = {{"per_row_us", r.per_row_s * 1e6}, {"mean_rows", r.mean_rows}};
  }
  j["durations_us"] = d;
  if (!rows.empty()) j["rows_us"] = rows;
  if (!c.costs.measured_flops.empty()) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [key, flops] : c.costs.measured_flops) f[key] = flops;
    j["flops"] = f;
  }
  if (!c.costs.instances.empty()) {
    nlohmann::ordered_json inst = nlohmann::ordered_json::object();
    for (const auto& [name, m] : c.costs.instances) {
      nlohmann::ordered_json e = nlohmann::ordered_json::object();
      if (m.rows >= 0) e["rows"] = m.rows;
      if (m.has_sends) {
        nlohmann::ordered_json sent = nlohmann::ordered_json::object();
        for (const auto& t : m.sends) sent[std::to_string(t.peer)] = t.bytes;
        e["sent_bytes"] = sent;
      }
      inst[name] = e;
    }
    j["instances"] = inst;
  }
  j["_fit"] = fit;
  return j.dump(2) + "\n";
}

void save_calibration(const Calibration& calibration, const std::string& path) {
  try {
    io::write_output_file(path, "calibration", calibration_to_json(calibration));
  } catch (const io::IoError& e) {
    throw SimError(SimErrorCode::BadCosts, e.what());
  }
}

}  // namespace ht::sim
