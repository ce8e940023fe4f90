// `hybrid-twin trace`: look at timelines from any source (our engine, the twin, PyTorch profiler
// / Kineto files): `summary` (overlap analytics table or JSON), `compare` (predicted vs measured
// with relative errors) and `svg` (a picture with exposed comm in red). Reading is logged on
// stderr with its rate; results go to stdout.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/compare.hpp"
#include "ht/traces/overlap.hpp"
#include "ht/traces/report.hpp"
#include "ht/traces/svg.hpp"
#include "ht/traces/units.hpp"

namespace ht::cli {
namespace {

namespace tr = ht::traces;

struct TraceArgs {
  std::string file, predicted, measured, output, from, to, title, comm_regex;
  bool json = false, cpu_ops = false;
  std::size_t top = 15, longest = 10;
  int width = 1400;
  CLI::App *summary = nullptr, *compare = nullptr, *svg = nullptr;
};

tr::Timeline load(const std::string& path, const TraceArgs& a) {
  tr::ReadOptions options;
  if (!a.comm_regex.empty()) options.comm_regex = a.comm_regex;
  options.include_cpu_ops = a.cpu_ops;
  tr::ReadStats stats;
  tr::Timeline t = tr::read_chrome_trace(path, options, stats);
  char line[256];
  std::snprintf(line, sizeof line, "%.3f MB in %.3f s (%.1f MB/s), %llu events, %llu spans",
                stats.bytes / 1e6, stats.seconds, stats.megabytes_per_second(),
                static_cast<unsigned long long>(stats.events),
                static_cast<unsigned long long>(stats.spans));
  io::log::Line("read", false) << "read " << path << " [" << t.source << "]: " << line;
  return t;
}

int run(const TraceArgs& a) {
  if (a.summary->parsed()) {
    tr::SummaryOptions options;
    options.longest = a.longest;
    const tr::OverlapSummary s = tr::summarize(load(a.file, a), options);
    std::cout << (a.json ? tr::summary_to_json(s) : tr::summary_table(s, a.top));
    return 0;
  }
  if (a.compare->parsed()) {
    const tr::Comparison c = tr::compare(load(a.predicted, a), load(a.measured, a));
    std::cout << (a.json ? tr::comparison_to_json(c) : tr::comparison_table(c));
    return 0;
  }
  tr::SvgOptions options;
  if (!a.from.empty()) options.from_s = tr::parse_seconds(a.from);
  if (!a.to.empty()) options.to_s = tr::parse_seconds(a.to);
  options.width_px = a.width;
  options.title = a.title;
  io::check_output_file(a.output, "SVG");  // before reading a trace of possibly gigabytes
  const tr::Timeline t = load(a.file, a);
  tr::write_svg(t, a.output, options);
  io::log::Line("wrote", false) << "wrote " << a.output;
  return 0;
}

void add_read_flags(CLI::App& sub, TraceArgs& a) {
  sub.add_option("--comm-regex", a.comm_regex,
                 "case-insensitive regex for comm kernels/ops in profiles without roles (replaces "
                 "the defaults: NCCL, all-to-all and other collectives, DeepEP/HybridEP/UCCL-EP/"
                 "pplx/NVSHMEM dispatch+combine, peer copies, c10d/gloo ops)");
  sub.add_flag("--cpu-ops", a.cpu_ops, "also read CPU ops (cpu_op, user_annotation, legacy profiler)");
}

const Registration reg{{
    "trace",
    "Summarize, compare and draw timelines (our traces, PyTorch profiler / Kineto files)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<TraceArgs>();
      sub.require_subcommand(1);

      a->summary = sub.add_subcommand("summary", "compute/comm busy time, exposed comm, hidden "
                                                 "fraction per device, longest exposed intervals, "
                                                 "per-kernel and per-category tables");
      a->summary->add_option("FILE", a->file, "Chrome-trace JSON")->required();
      a->summary->add_flag("--json", a->json, "print JSON instead of tables");
      a->summary->add_option("--top", a->top, "kernels listed in the table")->capture_default_str();
      a->summary->add_option("--longest", a->longest, "longest exposed intervals listed")
          ->capture_default_str();
      add_read_flags(*a->summary, *a);

      a->compare = sub.add_subcommand("compare", "predicted vs measured: step time, exposed comm, "
                                                 "hidden fraction and categories with relative errors");
      a->compare->add_option("PREDICTED", a->predicted, "Chrome-trace JSON of the prediction")->required();
      a->compare->add_option("MEASURED", a->measured, "Chrome-trace JSON of the measurement")->required();
      a->compare->add_flag("--json", a->json, "print JSON instead of a table");
      add_read_flags(*a->compare, *a);

      a->svg = sub.add_subcommand("svg", "draw a timeline: one lane per device stream, exposed comm in red");
      a->svg->add_option("FILE", a->file, "Chrome-trace JSON")->required();
      a->svg->add_option("-o,--output", a->output, "SVG file to write (atomically)")->check(kOutputPath)->required();
      a->svg->add_option("--from", a->from, "window start, e.g. 1.5ms, 200us (bare number: seconds)");
      a->svg->add_option("--to", a->to, "window end");
      a->svg->add_option("--width", a->width, "width of the time axis in pixels")->capture_default_str();
      a->svg->add_option("--title", a->title, "title line (default: the trace's source)");
      add_read_flags(*a->svg, *a);
      return [a] { return run(*a); };
    },
    70}};

}  // namespace
}  // namespace ht::cli
