// `hybrid-twin calibrate --trace MEASURED.json [-o FITTED.json] [--model-out MODEL.json] [--json]`:
// fits the twin's cost model to a measured timeline (see sim/calibrate.hpp) and prints the fit
// table, the platform the measurement ran on and the `simulate` command that predicts another
// schedule of the same model with it.
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/config.hpp"
#include "ht/sim/calibrate.hpp"
#include "ht/sim/platform.hpp"
#include "ht/traces/overlap.hpp"
#include "ht/traces/chrome.hpp"

namespace ht::cli {
namespace {

struct CalibrateArgs {
  std::string trace, output, model_out;
  bool json = false;
  bool fit_wake = true;
};

std::string meta(const traces::Timeline& t, const std::string& key) {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? "" : it->second;
}

int meta_int(const traces::Timeline& t, const std::string& key, int fallback) {
  const std::string v = meta(t, key);
  try {
    return v.empty() ? fallback : std::stoi(v);
  } catch (const std::logic_error&) {
    throw UsageError("trace metadata " + key + " = '" + v + "' (from the trace's otherData.metadata) is not an integer");
  }
}

// The plan the measured run executed, rebuilt from the trace metadata that `train --trace`
// writes (pattern, model_dims, ep, pp, vpp, ranks, microbatches, overlap, delay_wgrad), or
// nullopt when the trace does not say enough (an imported profile).
std::optional<schedule::Plan> measured_plan(const traces::Timeline& t) {
  const std::string pattern = meta(t, "pattern"), dims = meta(t, "model_dims");
  if (pattern.empty() || dims.empty() || meta(t, "ep").empty() || meta(t, "microbatches").empty()) return std::nullopt;
  schedule::ParallelConfig pc;
  pc.ep = meta_int(t, "ep", 1);
  pc.pp = meta_int(t, "pp", 1);
  pc.vpp = meta_int(t, "vpp", 1);
  if (pc.vpp <= 1 && pc.pp == 1) pc.vpp = 0;
  pc.microbatches = meta_int(t, "microbatches", 1);
  pc.dp = meta_int(t, "ranks", pc.ep * pc.pp) / std::max(1, pc.pp);
  schedule::ScheduleOptions so;
  so.overlap = meta(t, "overlap") == "true";
  so.delay_wgrad = meta(t, "delay_wgrad") == "true";
  schedule::Plan plan;
  try {
    plan = schedule::build_plan(patterns::parse(pattern), schedule::model_dims_from_json(dims), pc, so);
  } catch (const std::exception& e) {
    throw UsageError(std::string("the trace's metadata (pattern, model_dims, ep, pp, vpp, ranks, microbatches) "
                                 "describes a plan that cannot be built: ") + e.what() +
                     " (use --no-fit-wake to calibrate without replaying it)");
  }
  if (!meta(t, "schedule").empty() && plan.schedule != meta(t, "schedule")) return std::nullopt;
  return plan;
}

int run(const CalibrateArgs& a) {
  // Outputs are checked before the trace is read and the measured plan replayed.
  if (!a.output.empty()) io::check_output_file(a.output, "calibration");
  if (!a.model_out.empty()) io::check_output_file(a.model_out, "model file");
  const traces::Timeline t = traces::read_chrome_trace(a.trace);
  sim::Calibration c = sim::calibrate(t);
  // The wake-up latency that makes the twin replay the measured run in its measured step time.
  double replayed_s = 0, median_gap_s = c.costs.wake_latency_s;
  std::optional<schedule::Plan> plan;
  if (a.fit_wake) plan = measured_plan(t);
  if (plan) {
    c.costs.wake_latency_s =
        sim::fit_wake_latency(*plan, sim::parse_platform(c.platform), c.costs, traces::summarize(t).span_s, &replayed_s);
  }
  if (!a.output.empty()) sim::save_calibration(c, a.output);
  const std::string dims = meta(t, "model_dims");
  if (!a.model_out.empty()) {
    if (dims.empty()) throw UsageError("--model-out: the trace records no model_dims (write it with `hybrid-twin train --trace`)");
    io::write_output_file(a.model_out, "model file", schedule::model_dims_to_json(schedule::model_dims_from_json(dims)));
  }
  if (a.json) {
    std::cout << sim::calibration_to_json(c);
    return 0;
  }
  std::cout << "measured     " << a.trace << " (" << t.spans.size() << " spans"
            << (c.schedule.empty() ? "" : ", " + c.schedule) << ")\n"
            << "platform     " << c.platform << "\n"
            << "comm extra   " << std::fixed << std::setprecision(1) << c.costs.comm_launch_s * 1e6
            << " us per all-to-all (mean over " << c.comm_samples << " collectives)\n"
            << "wake latency " << c.costs.wake_latency_s * 1e6 << " us";
  if (plan)
    std::cout << " (fitted: the twin replays the measured " << traces::summarize(t).span_s * 1e3 << " ms step in "
              << replayed_s * 1e3 << " ms; median measured hand-off " << median_gap_s * 1e6 << " us)";
  else
    std::cout << " (median measured hand-off; the trace does not name its plan)";
  std::cout << "\n\n"
            << std::left << std::setw(34) << "node type" << std::right << std::setw(8) << "samples" << std::setw(12)
            << "mean us" << std::setw(12) << "min us" << std::setw(12) << "max us" << "\n";
  for (const auto& r : c.rows)
    std::cout << std::left << std::setw(34) << r.key << std::right << std::setw(8) << r.samples << std::setw(12)
              << r.mean_s * 1e6 << std::setw(12) << r.min_s * 1e6 << std::setw(12) << r.max_s * 1e6 << "\n";
  std::cout << std::defaultfloat;
  if (!a.output.empty()) {
    std::cout << "\nwrote " << a.output << "; predict another schedule with:\n  hybrid-twin simulate --pattern '"
              << (c.pattern.empty() ? "PATTERN" : c.pattern) << "'"
              << (a.model_out.empty() ? "" : " --model " + a.model_out) << " --ep " << (meta(t, "ep").empty() ? "N" : meta(t, "ep"))
              << " --dp " << (meta(t, "ep").empty() ? "N" : meta(t, "ep")) << " --microbatches "
              << (meta(t, "microbatches").empty() ? "M" : meta(t, "microbatches")) << " --platform '" << c.platform
              << "' --costs " << a.output << " --overlap --no-delay-wgrad\n";
  }
  return 0;
}

const Registration reg{{"calibrate",
                        "Fit the twin's cost model to a measured trace (from `train --trace`) for `simulate --costs`",
                        [](CLI::App& sub) -> std::function<int()> {
                          auto a = std::make_shared<CalibrateArgs>();
                          sub.add_option("--trace,TRACE", a->trace, "measured Chrome-trace JSON")->required();
                          sub.add_option("-o,--output", a->output, "write the fitted cost model JSON (atomically)");
                          sub.add_option("--model-out", a->model_out,
                                         "write the model dimensions recorded in the trace (for simulate --model)");
                          sub.add_flag("--json", a->json, "print the fitted cost model JSON");
                          sub.add_flag("!--no-fit-wake", a->fit_wake,
                                       "keep the median measured hand-off as the wake-up latency instead of fitting "
                                       "it by replaying the measured plan");
                          return [a] { return run(*a); };
                        },
                        55}};

}  // namespace
}  // namespace ht::cli
