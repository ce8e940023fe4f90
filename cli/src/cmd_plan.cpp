// `hybrid-twin plan`: build the schedule plan of a pattern on a parallel layout and show it: a
// per-rank table of node counts per slot and phase and the first issued nodes of rank 0 (for
// people), or the versioned plan JSON (--json, -o FILE) that the twin and outside tools read.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/plan_json.hpp"
#include "ht/schedule/summary.hpp"
#include "model_flags.hpp"
#include "megatron_args.hpp"

namespace ht::cli {
namespace {

namespace hs = ht::schedule;

struct PlanArgs {
  std::string pattern;
  ModelFlags model;
  LayoutFlags layout;
  ScheduleFlags schedule;
  bool json_out = false;
  std::string output;
  int show = 40;
};

std::string phase_counts(const hs::SlotPhaseCounts& c, hs::Slot slot, bool with_weight) {
  std::ostringstream out;
  out << hs::count(c, slot, hs::Phase::Forward) << "/" << hs::count(c, slot, hs::Phase::Backward);
  if (with_weight) out << "/" << hs::count(c, slot, hs::Phase::Weight);
  return out.str();
}

std::string engineering(double v) {
  const char* units[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (v >= 1000 && u < 5) v /= 1000, ++u;
  std::ostringstream out;
  out << std::fixed << std::setprecision(v < 10 && u > 0 ? 2 : v < 100 && u > 0 ? 1 : 0) << v << units[u];
  return out.str();
}

void print_summary(const hs::Plan& plan, int show) {
  std::cout << "plan      " << plan.schedule << "  pattern '" << plan.pattern << "'\n"
            << "layout    tp " << plan.tp << " x cp " << plan.cp << " x dp " << plan.dp << " x pp " << plan.pp
            << " (vpp " << plan.chunks << "), ep " << plan.ep << " x etp " << plan.etp << ", " << plan.microbatches
            << " microbatches, overlap "
            << (plan.overlap ? "on" : "off") << ", delayed wgrad " << (plan.delay_wgrad ? "on" : "off")
            << "\n"
            << "size      " << plan.nodes.size() << " nodes on " << plan.ranks.size() << " ranks, "
            << plan.collectives.size() << " collectives\n\n";
  const std::vector<std::pair<hs::Slot, bool>> columns = {
      {hs::Slot::PreProcess, false}, {hs::Slot::PreDispatch, true}, {hs::Slot::Dispatch, false},
      {hs::Slot::Mlp, true},         {hs::Slot::Combine, false},    {hs::Slot::MtpPost, false},
      {hs::Slot::PostProcess, false}, {hs::Slot::PipeSend, false},  {hs::Slot::PipeRecv, false}};
  std::cout << "node counts per rank (F/B, or F/B/W for slots with weight gradients)\n" << std::left
            << std::setw(6) << "rank" << std::setw(4) << "pp" << std::setw(4) << "dp" << std::setw(4) << "ep";
  for (const auto& [slot, w] : columns) std::cout << std::setw(14) << hs::to_string(slot);
  std::cout << std::setw(10) << "allreduce" << "total\n";
  for (const hs::RankPlan& r : plan.ranks) {
    const auto c = hs::count_nodes(plan, r.rank);
    std::cout << std::setw(6) << r.rank << std::setw(4) << r.pp_rank << std::setw(4) << r.dp_rank
              << std::setw(4) << r.ep_rank;
    for (const auto& [slot, w] : columns) std::cout << std::setw(14) << phase_counts(c, slot, w);
    std::cout << std::setw(10) << hs::count(c, hs::Slot::GradAllReduce, hs::Phase::Backward)
              << r.issue.size() << "\n";
  }
  if (plan.ranks.empty() || show <= 0) return;
  const auto& issue = plan.ranks.front().issue;
  const std::size_t n = std::min<std::size_t>(issue.size(), static_cast<std::size_t>(show));
  std::cout << "\nfirst " << n << " of " << issue.size() << " nodes issued by rank 0\n"
            << std::setw(6) << "#" << std::setw(8) << "id" << std::setw(9) << "stream" << std::setw(28)
            << "node" << std::setw(8) << "what" << std::setw(10) << "flops" << std::setw(10) << "bytes"
            << "deps\n";
  for (std::size_t i = 0; i < n; ++i) {
    const hs::Node& node = plan.node(issue[i]);
    std::string deps;
    for (int d : node.deps) deps += (deps.empty() ? "" : ",") + std::to_string(d);
    double sent = 0;
    for (const auto& t : node.sends) sent += t.bytes;
    std::cout << std::setw(6) << i << std::setw(8) << node.id << std::setw(9) << hs::to_string(node.stream)
              << std::setw(28) << node.label() << std::setw(8) << node.symbols << std::setw(10)
              << engineering(node.flops) << std::setw(10)
              << engineering(node.stream == hs::Stream::Comm ? sent : node.mem_bytes) << deps << "\n";
  }
}

int run(const PlanArgs& a) {
  const hs::ModelCard card = a.model.resolve_card();
  const std::string pattern = !a.pattern.empty() ? a.pattern : card.pattern;
  if (pattern.empty())
    throw UsageError("give a pattern (PATTERN or --pattern) or a model card (--model NAME; `hybrid-twin models` lists them)");
  const auto parsed = ht::patterns::parse(pattern);
  hs::ModelDims dims = card.dims;
  const hs::ParallelConfig parallel = a.layout.resolve(dims);
  if (!a.output.empty()) io::check_output_file(a.output, "plan file");  // before the build
  const hs::Plan plan = hs::build_plan(parsed, dims, parallel, a.schedule.resolve(parallel, parsed.mtp_depths));
  if (!a.output.empty()) {
    hs::save_plan(a.output, plan);
    io::log::Line("wrote", false) << "wrote " << a.output << " (" << plan.nodes.size() << " nodes, "
                                  << plan.ranks.size() << " ranks)";
  }
  if (a.json_out) {
    std::cout << hs::plan_to_json(plan);
  } else if (a.output.empty()) {
    print_summary(plan, a.show);
  }
  return 0;
}

const Registration reg{{
    "plan",
    "Build the per-rank schedule plan (nodes, streams, issue order, dependencies, costs)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<PlanArgs>();
      sub.add_option("--pattern,PATTERN", a->pattern,
                     "hybrid layer pattern, e.g. '[*E][*E]' or 'M[*E]|M[*E]' (default: the model card's)");
      add_model_flags(sub, a->model);
      add_layout_flags(sub, a->layout);
      add_megatron_args_flag(sub);
      add_schedule_flags(sub, a->schedule);
      sub.add_flag("--json", a->json_out, "print the plan JSON instead of tables");
      sub.add_option("-o,--output", a->output, "write the plan JSON to FILE (atomically)")->check(kOutputPath);
      sub.add_option("--show", a->show, "how many issued nodes of rank 0 to list")->capture_default_str();
      return [a] { return run(*a); };
    },
    20}};

}  // namespace
}  // namespace ht::cli
