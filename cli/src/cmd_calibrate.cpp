// `hybrid-twin calibrate --trace MEASURED.json [-o FITTED.json] [--model-out MODEL.json] [--json]`:
// fits the twin's cost model to a measured timeline (see sim/calibrate.hpp) and prints the fit
// table, the platform the measurement ran on and the `simulate` command that predicts another
// schedule of the same model with it.
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "command.hpp"
#include "ht/schedule/atomic_file.hpp"
#include "ht/sim/calibrate.hpp"
#include "ht/traces/chrome.hpp"

namespace ht::cli {
namespace {

struct CalibrateArgs {
  std::string trace, output, model_out;
  bool json = false;
};

std::string meta(const traces::Timeline& t, const std::string& key) {
  const auto it = t.metadata.find(key);
  return it == t.metadata.end() ? "" : it->second;
}

int run(const CalibrateArgs& a) {
  const traces::Timeline t = traces::read_chrome_trace(a.trace);
  const sim::Calibration c = sim::calibrate(t);
  if (!a.output.empty()) sim::save_calibration(c, a.output);
  const std::string dims = meta(t, "model_dims");
  if (!a.model_out.empty()) {
    if (dims.empty()) throw UsageError("--model-out: the trace records no model_dims (write it with `hybrid-twin train --trace`)");
    schedule::detail::write_file_atomically(a.model_out, dims + "\n");
  }
  if (a.json) {
    std::cout << sim::calibration_to_json(c);
    return 0;
  }
  std::cout << "measured     " << a.trace << " (" << t.spans.size() << " spans"
            << (c.schedule.empty() ? "" : ", " + c.schedule) << ")\n"
            << "platform     " << c.platform << "\n"
            << "comm extra   " << std::fixed << std::setprecision(1) << c.costs.comm_launch_s * 1e6
            << " us per all-to-all (mean over " << c.comm_samples << " collectives)\n\n"
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
                          return [a] { return run(*a); };
                        },
                        55}};

}  // namespace
}  // namespace ht::cli
