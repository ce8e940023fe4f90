// `hybrid-twin calibrate --trace MEASURED.json [-o FITTED.json] [--model-out MODEL.json] [--json]`:
// fits the twin's cost model to a measured timeline (see sim/calibrate.hpp) and prints the fit
// table, the platform the measurement ran on and the `simulate` command that predicts another
// schedule of the same model with it.
// `hybrid-twin calibrate --gpu [-o COSTS.json] [--emulate]`: microbenchmarks the local GPU through
// the CUDA backend (engine/kernel_table.hpp) and writes its kernel table as a cost file, so that
// `simulate --costs COSTS.json` prices GEMMs and memory traffic as that GPU runs them. Without a
// GPU it says so and exits 3 (--emulate runs the host emulation instead). Built wherever the
// engine is (the GPU check builds it without SimGrid); fitting a trace needs the twin.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#ifdef HT_CLI_ENGINE
#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/kernel_table.hpp"
#endif
#ifdef HT_CLI_SIM
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/config.hpp"
#include "ht/sim/calibrate.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/overlap.hpp"
#endif

namespace ht::cli {
namespace {

struct CalibrateArgs {
  std::string trace, output, model_out;
  bool json = false;
  bool fit_wake = true;
  bool gpu = false, emulate = false;
  int repeats = 10;
  double sustain = -1;  // seconds of back-to-back GEMMs; -1: 10 on a GPU, 0.4 on the emulation
};

#ifdef HT_CLI_ENGINE
// The grouped GEMMs of a kernel table: TFLOP/s of each group, and (where the twin is built) the
// measured time over the twin's rule for it on this table's own GEMM rates, which is the factor
// `simulate --costs` applies (sim/cost_model.hpp, grouped_correction).
void print_grouped(const engine::KernelTable& t, [[maybe_unused]] const nlohmann::json& costs) {
  if (t.grouped_seconds.empty()) return;
  std::cout << "grouped GEMM TE's loop (one cuBLASLt GEMM per expert, 4 streams): host " << std::fixed
            << std::setprecision(1) << t.grouped_launch_s * 1e6 << " us per expert GEMM\n";
#ifdef HT_CLI_SIM
  // The rule on this GPU: its SM count, and the measured bandwidth uncapped by the preset's.
  sim::PlatformSpec platform = sim::preset("dgx-h100");
  if (t.sms > 0) platform.gpu.sms = t.sms;
  platform.gpu.hbm_bytes_per_s = std::max(platform.gpu.hbm_bytes_per_s, t.hbm_bytes_per_s);
  sim::apply_kernel_table(platform, sim::parse_costs_json(costs.dump()));
  std::cout << "             TFLOP/s (measured over the twin's rule) by rows per expert:\n";
#else
  std::cout << "             TFLOP/s by rows per expert:\n";
#endif
  const std::size_t rows = t.grouped_rows.size(), shapes = t.grouped_shapes.size();
  for (std::size_t is = 0; is < shapes; ++is)
    for (std::size_t ie = 0; ie < t.grouped_experts.size(); ++ie) {
      const auto [k, n] = t.grouped_shapes[is];
      const int g = t.grouped_experts[ie];
      std::cout << "  k " << k << " n " << n << ", " << g << " experts:";
      for (std::size_t ir = 0; ir < rows; ++ir) {
        const double m = t.grouped_rows[ir], seconds = t.grouped_seconds[(ie * rows + ir) * shapes + is];
        std::cout << "  " << t.grouped_rows[ir] << " " << std::setprecision(1) << 2.0 * g * m * k * n / seconds / 1e12;
#ifdef HT_CLI_SIM
        const double bytes = 2.0 * (double(g) * k * n + g * m * (k + n));
        std::cout << " (" << std::setprecision(2) << seconds / sim::gemm_seconds_burst(m, n, k, g, bytes, platform.gpu)
                  << ")";
#endif
      }
      std::cout << "\n";
    }
  std::cout << std::defaultfloat;
}
#endif

// --gpu: the kernel table of the local GPU (or of the host emulation) as a cost file.
int run_gpu(const CalibrateArgs& a) {
#ifdef HT_CLI_ENGINE
  if (!a.output.empty()) io::check_output_file(a.output, "kernel table");
  engine::KernelBenchOptions o;
  o.emulate = a.emulate;
  o.repeats = a.repeats;
  o.sustain_seconds = a.sustain >= 0 ? a.sustain : (a.emulate ? 0.4 : 10);
  if (!a.emulate) {
    const engine::CudaProbe probe = engine::cuda_probe();
    if (!probe.usable) {
      io::log::Line("calibrate", false) << "calibrate --gpu: skipped, no usable CUDA GPU (" << probe.reason
                                        << "); --emulate runs the host emulation";
      return 3;
    }
  }
  io::log::Line("calibrate", false) << "calibrate --gpu: " << o.sizes.size() * o.sizes.size() * o.sizes.size()
                                    << " BF16 GEMM shapes, HBM and "
                                    << o.grouped_experts.size() * o.grouped_rows.size() * o.grouped_shapes.size()
                                    << " grouped GEMMs" << (a.emulate ? " on the host emulation" : "") << "...";
  engine::KernelTable t = engine::measure_kernel_table(o);
  // A part measured out of range (a shared or throttled GPU) is left out, and the rest written.
  for (const std::string& why : engine::drop_unreadable_parts(t)) io::log::warning() << "calibrate --gpu: " << why;
  nlohmann::json costs = {{"_comment", "written by `hybrid-twin calibrate --gpu`; read by `hybrid-twin simulate --costs`"},
                          {"kernel_table", engine::kernel_table_to_json(t)}};
#ifdef HT_CLI_SIM
  sim::parse_costs_json(costs.dump());  // what simulate --costs reads: refused here, never written
#endif
  if (!a.output.empty()) io::write_output_file(a.output, "kernel table", costs.dump(1) + "\n");
  if (a.json) {
    std::cout << costs.dump(2) << "\n";
    return 0;
  }
  const std::size_t n = t.sizes.size();
  auto rate = [&](std::size_t im, std::size_t in, std::size_t ik) { return t.gemm_bf16_tflops[(im * n + in) * n + ik]; };
  std::cout << "device       " << t.device << (t.emulated ? " (emulated: these figures describe the CPU)" : "") << "\n"
            << "HBM          " << std::fixed << std::setprecision(0) << t.hbm_bytes_per_s / 1e9 << " GB/s (copy kernel)\n"
            << "BF16 GEMM    TFLOP/s of square shapes:";
  for (std::size_t i = 0; i < n; ++i) std::cout << " " << t.sizes[i] << "^3 " << std::setprecision(1) << rate(i, i, i);
  std::cout << std::defaultfloat << "\n";
  print_grouped(t, costs);
  if (!t.sharing_sms.empty()) {
    std::cout << "beside SMs   4096^3 GEMMs' speed beside a kernel holding s SMs"
              << (t.sms > 0 ? " (the twin's rule (S - s)/S)" : "") << ":";
    for (std::size_t i = 0; i < t.sharing_sms.size(); ++i) {
      std::cout << "  " << t.sharing_sms[i] << ": " << std::fixed << std::setprecision(2) << t.sharing_speed[i];
      if (t.sms > 0) std::cout << " (" << double(t.sms - t.sharing_sms[i]) / t.sms << ")";
    }
    std::cout << "\n" << std::defaultfloat;
  }
  if (t.sustained_fraction > 0)
    std::cout << "sustained    " << t.sustained_size << "^3 BF16 GEMMs back to back: " << std::fixed
              << std::setprecision(1) << t.window_tflops.front() << " TFLOP/s in the first window, "
              << t.window_tflops.back() << " in the last (" << t.window_tflops.size()
              << " windows), burst " << t.burst_tflops << ": sustained " << std::setprecision(3)
              << t.sustained_fraction << " of burst\n"
              << std::defaultfloat;
  if (!a.output.empty())
    std::cout << "wrote " << a.output << "; price a what-if with it: hybrid-twin simulate ... --costs " << a.output << "\n";
  return 0;
#else
  (void)a;
  throw UsageError("calibrate --gpu needs the engine, which this build does not have");
#endif
}

#ifdef HT_CLI_SIM
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
#endif

int run(const CalibrateArgs& a) {
  if (a.gpu) {
    if (!a.trace.empty()) throw UsageError("--gpu measures the GPU; it takes no trace (give one or the other)");
    if (!a.model_out.empty()) throw UsageError("--model-out goes with --trace, not --gpu");
    return run_gpu(a);
  }
  if (a.emulate) throw UsageError("--emulate goes with --gpu");
  if (a.sustain >= 0) throw UsageError("--sustain goes with --gpu");
  if (a.trace.empty()) throw UsageError("give --trace MEASURED.json (fit a measured run) or --gpu (measure this GPU)");
#ifndef HT_CLI_SIM
  throw UsageError("calibrate --trace needs the twin (SimGrid), which this build does not have");
#else
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
#endif
}

const Registration reg{{"calibrate",
                        "Fit the twin's cost model to a measured trace, or measure this GPU's kernels (--gpu), for "
                        "`simulate --costs`",
                        [](CLI::App& sub) -> std::function<int()> {
                          auto a = std::make_shared<CalibrateArgs>();
                          sub.add_option("--trace,TRACE", a->trace, "measured Chrome-trace JSON");
                          sub.add_flag("--gpu", a->gpu,
                                       "microbenchmark the local GPU (BF16 GEMMs by shape, HBM, grouped GEMMs as TE "
                                       "issues them, the sustained GEMM rate) and write its kernel table for "
                                       "simulate --costs; exit 3 without a GPU");
                          sub.add_flag("--emulate", a->emulate, "--gpu on the host emulation (no GPU needed)");
                          sub.add_option("--sustain", a->sustain,
                                         "--gpu: seconds of back-to-back GEMMs for the sustained rate (default 10; "
                                         "0.4 with --emulate; 0 skips it)")
                              ->check(CLI::Range(0.0, 600.0));
                          sub.add_option("--repeats", a->repeats, "--gpu: timed runs per kernel (the fastest counts)")
                              ->check(CLI::Range(1, 1000))
                              ->capture_default_str();
                          sub.add_option("-o,--output", a->output, "write the fitted cost model JSON (atomically)")->check(kOutputPath);
                          sub.add_option("--model-out", a->model_out,
                                         "write the model dimensions recorded in the trace (for simulate --model)")
                              ->check(kOutputPath);
                          sub.add_flag("--json", a->json, "print the fitted cost model JSON");
                          sub.add_flag("!--no-fit-wake", a->fit_wake,
                                       "keep the median measured hand-off as the wake-up latency instead of fitting "
                                       "it by replaying the measured plan");
                          return [a] { return run(*a); };
                        },
                        55}};

}  // namespace
}  // namespace ht::cli
