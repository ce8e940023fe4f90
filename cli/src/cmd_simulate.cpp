// `hybrid-twin simulate`: the what-if face. pattern + model + layout -> schedule::build_plan ->
// sim::replay on a simulated cluster -> step time, hidden/exposed all-to-all and bubbles, plus a
// Chrome trace and an SVG. --sweep varies knobs (one row per combination, overlap off and on side
// by side); --compare-grouping sets a grouped pattern next to its flattened form.
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/plan_size.hpp"
#include "ht/schedule/flops.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"
#include "ht/sim/replay.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/svg.hpp"
#include "model_flags.hpp"
#include "megatron_args.hpp"
#include "sweep_axis.hpp"
#include "process_pool.hpp"
#include "whatif.hpp"

namespace ht::cli {
namespace {

namespace hs = ht::schedule;
namespace sim = ht::sim;

struct SimulateArgs {
  std::string pattern;
  ModelFlags model;
  LayoutFlags layout;
  ScheduleFlags schedule;
  PhysicsFlags physics;
  std::string platform = "dgx-h100";
  std::string costs_file;
  std::vector<std::string> cost_overrides;
  std::string a2a_model = "auto";
  int pairwise_max_group = sim::ReplayOptions{}.pairwise_max_group;
  std::string trace_out, svg_out;
  bool json_out = false;
  bool no_fold = false;
  int jobs = 1;
  std::vector<std::string> sweeps;
  bool compare_grouping = false;
  TrainBudgetFlags train;
};

void print_run(const Setup& s, const Run& r, const TrainBudget& budget) {
  const auto& m = r.result.summary;
  const auto& mem = r.memory;
  const auto& l = r.layout;
  std::ostringstream perf;
  perf << std::fixed << std::setprecision(0) << tokens_per_s(r) << " tokens/s, " << std::setprecision(1)
       << tflops_per_gpu(r) << " model TFLOP/s per GPU, MFU " << pct(mfu(r));
  if (!s.model.empty()) std::cout << "model        " << s.model << "\n";
  std::cout << "pattern      '" << s.pattern << "'\n"
            << "layout       " << hs::describe_layout(l) << "\n"
            << "batch        " << r.global_batch << " sequences of " << r.seq_len << " tokens = " << l.dp << " dp x "
            << l.microbatches << " microbatches x " << r.global_batch / (double(l.dp) * l.microbatches) << "\n"
            << "schedule     " << r.plan.schedule << ", overlap " << (r.plan.overlap ? "on" : "off")
            << ", delayed wgrad " << (r.plan.delay_wgrad ? "on" : "off") << ", recompute "
            << hs::to_string(l.recompute)
            << (l.offload.any() ? ", offload " + hs::to_string(l.offload) : std::string()) << "\n"
            << "grad sync    "
            << (l.optimizer.fsdp ? std::string("Megatron-FSDP: each layer gathered before its forward and backward, "
                                               "its gradients reduce-scattered after")
                : l.optimizer.sync == hs::GradSync::Megatron
                    ? std::string(l.optimizer.distributed ? "distributed optimizer" : "DDP all-reduce") +
                          (l.optimizer.overlap_grad_reduce ? ", reduce overlapped with backward" : ", reduce after backward") +
                          (l.optimizer.distributed ? (l.optimizer.overlap_param_gather ? ", gather before forward"
                                                                                       : ", gather after step")
                                                   : "")
                    : std::string("one all-reduce after the backward (engine)"))
            << (l.optimizer.grad_reduce_bf16 ? ", gradients in bf16" : "") << "\n";
  {
    std::ostringstream physics;
    physics << hs::to_string(r.options.precision) << " GEMMs"
            << (l.tp > 1 ? (r.options.tp_comm_overlap ? ", TP comm overlapped" : ", TP comm in line") : "");
    if (l.ep > 1) {
      std::ostringstream load;
      load << std::fixed << std::setprecision(3) << r.plan.expert_load_factor;
      physics << ", " << hs::to_string(r.options.dispatcher) << " dispatcher, "
              << (r.options.expert_load > 0 ? std::string("given expert load")
                                            : std::string(hs::to_string(r.options.routing)) + " routing")
              << " (busiest EP rank " << load.str() << "x the mean";
      const bool rdma =
          r.options.dispatcher == hs::Dispatcher::DeepEP || r.options.dispatcher == hs::Dispatcher::HybridEP;
      if (rdma && r.plan.expert_node_load_factor != r.plan.expert_load_factor) {
        std::ostringstream node;
        node << std::fixed << std::setprecision(3) << r.plan.expert_node_load_factor;
        physics << ", its RDMA copies at the busiest node's " << (r.options.expert_node_load > 0 ? "given " : "")
                << node.str() << "x";
      }
      physics << ")";
    }
    if (r.options.cuda_graphs) physics << ", CUDA graphs";
    std::cout << "physics      " << physics.str() << "\n";
  }
  if (r.plan.account_embedding || r.plan.account_loss)
    std::cout << "pipeline     layers split with the " << (r.plan.account_embedding ? "embedding" : "")
              << (r.plan.account_embedding && r.plan.account_loss ? " and the " : "")
              << (r.plan.account_loss ? "loss" : "") << " counted as a layer\n";
  if (l.split.uneven())
    std::cout << "pipeline     uneven split: "
              << (l.split.first_stage_layers >= 0 ? "first rank " + std::to_string(l.split.first_stage_layers) + " layers" : "")
              << (l.split.first_stage_layers >= 0 && l.split.last_stage_layers >= 0 ? ", " : "")
              << (l.split.last_stage_layers >= 0 ? "last rank " + std::to_string(l.split.last_stage_layers) + " layers" : "")
              << ", the middle ranks the rest\n";
  std::cout << sim::describe(sim::sized_for(s.platform, r.plan.layout_ranks()))
            << "step time    " << ms(m.step_time_s) << "  (" << perf.str() << ")\n"
            << (budget.asked() ? "to train     " + budget.line(tokens_per_s(r), l.global_ranks()) + "\n" : "")
            << "memory       " << gib(mem.total()) << " + " << gib(r.overhead.total()) << " runtime"
            << (r.memory_margin > 0 ? " + " + gib(r.memory_margin) + " margin" : "") << " of " << gib(r.hbm_bytes)
            << (fits(r) ? " (fits)" : " (DOES NOT FIT)") << " on rank " << mem.rank << ": weights " << gib(mem.weights)
            << ", gradients " << gib(mem.gradients) << ", optimizer " << gib(mem.optimizer) << ", activations "
            << gib(mem.activations) << " (" << mem.microbatches_in_flight << " microbatches in flight)\n"
            << "runtime      CUDA context " << gib(r.overhead.cuda_context) << ", NCCL " << gib(r.overhead.nccl) << " ("
            << r.overhead.communicators << " communicators)"
            << (r.overhead.dispatcher > 0 ? ", DeepEP buffers " + gib(r.overhead.dispatcher) : std::string()) << "\n"
            << "compute      " << ms(m.compute_busy_s) << " busy per GPU (busiest " << ms(m.max_compute_busy_s)
            << "), bubble " << pct(m.bubble_fraction) << "\n"
            << "all-to-all   " << ms(m.a2a_total_s) << " per GPU, exposed " << ms(m.a2a_exposed_s) << ", hidden "
            << pct(m.a2a_hidden_fraction) << "\n"
            << "pipeline p2p " << ms(m.p2p_total_s) << ", gradient all-reduce " << ms(m.allreduce_s) << "\n";
  if (m.tp_comm_s > 0 || m.cp_comm_s > 0)
    std::cout << "tp / cp      " << ms(m.tp_comm_s) << " TP/SP collectives, " << ms(m.cp_comm_s)
              << " CP all-to-alls (in line on the compute stream)\n";
  if (m.dp_comm_s > 0 || m.optimizer_s > 0)
    std::cout << "dp stream    " << ms(m.dp_comm_s) << " gradient reduce + parameter gather, exposed "
              << ms(m.dp_exposed_s) << "; optimizer step " << ms(m.optimizer_s) << "\n";
  std::cout
            << "simulated    " << m.activities << " activities (" << m.flows << " flows, " << r.result.a2a_model
            << " all-to-all) on " << m.gpus << " GPUs in " << std::setprecision(3) << r.wall_s << " s\n";
}

int to_int(const std::string& key, const std::string& v) {
  std::size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size()) throw UsageError("--sweep " + key + ": '" + v + "' is not an integer");
  return x;
}

std::vector<std::string> sweep_keys() {
  std::vector<std::string> keys = {"pattern", "ep", "pp", "vpp", "dp", "microbatches", "tp", "cp", "etp"};
  for (const char* k : {"routing_skew", "expert_load", "expert_node_load", "launch_overhead_us", "comm_launch_us",
                        "interference_factor"})
    keys.emplace_back(k);
  for (const auto& k : sim::platform_keys()) keys.push_back(k);
  for (const auto& f : hs::model_fields()) keys.emplace_back(f.name);
  return keys;
}

void apply(Setup& s, const std::string& key, const std::string& v) {
  if (key == "pattern") s.pattern = v;
  else if (key == "ep") s.parallel.ep = to_int(key, v);
  else if (key == "pp") s.parallel.pp = to_int(key, v);
  else if (key == "vpp") s.parallel.vpp = to_int(key, v);
  else if (key == "dp") s.parallel.dp = to_int(key, v);
  else if (key == "microbatches") s.parallel.microbatches = to_int(key, v);
  else if (key == "tp") s.parallel.tp = to_int(key, v);
  else if (key == "cp") s.parallel.cp = to_int(key, v);
  else if (key == "etp") s.parallel.etp = to_int(key, v);
  else if (key == "routing_skew" || key == "expert_load" || key == "expert_node_load") {
    try {
      (key == "routing_skew"  ? s.options.routing_skew
       : key == "expert_load" ? s.options.expert_load
                              : s.options.expert_node_load) = std::stod(v);
    } catch (const std::exception&) {
      throw UsageError("--sweep " + key + ": '" + v + "' is not a number");
    }
  } else if (key == "launch_overhead_us" || key == "comm_launch_us" || key == "interference_factor") {
    sim::set_cost_key(s.costs, key, v);
  } else {
    for (const auto& f : hs::model_fields())
      if (key == f.name) {
        s.dims.*f.member = to_int(key, v);
        return;
      }
    for (const auto& k : sim::platform_keys())
      if (key == k) {
        sim::set_platform_key(s.platform, key, v);
        return;
      }
    std::string known;
    for (const auto& k : sweep_keys()) known += (known.empty() ? "" : ", ") + k;
    throw UsageError("unknown --sweep key '" + key + "' (known: " + known + ")");
  }
}

// A sweep combination whose plan would be too large to build is refused before the first replay
// (a cell's other errors are reported in its row). A pattern that does not parse is a cell error.
void check_plan_size_of(const Setup& s, const std::string& label) {
  const ht::patterns::ParsedPattern* parsed = nullptr;
  try {
    parsed = &s.parsed();
  } catch (const std::exception&) {
    return;
  }
  try {
    hs::check_plan_size(*parsed, s.parallel, static_cast<double>(hs::built_ranks(s.parallel, build_options(s)).size()));
  } catch (const std::exception& e) {
    throw UsageError("--sweep " + label + ": " + e.what());
  }
}

// Overlap forced on or off for one column; delayed wgrad follows the user's flags.
Setup with_overlap(Setup s, const ScheduleFlags& flags, bool overlap) {
  s.options.overlap = overlap;
  s.options.delay_wgrad = overlap && !flags.delay_off && (flags.delay_on || !s.parallel.optimizer.fsdp);
  return s;
}

std::string row_cell(const std::function<Run()>& f, nlohmann::json& out) {
  try {
    Run r = f();
    out = summary_json(r);
    return ms(r.result.summary.step_time_s);
  } catch (const std::exception& e) {
    out = {{"error", e.what()}};
    return "n/a";
  }
}

int run_sweep(const Setup& base, const SimulateArgs& a, const sim::ReplayOptions& ro) {
  std::vector<Axis> axes;
  for (const auto& s : a.sweeps) {
    axes.push_back(parse_axis(s));
    for (std::size_t k = 0; k + 1 < axes.size(); ++k)
      if (axes[k].key == axes.back().key)
        throw UsageError("--sweep " + axes.back().key + " is given twice; list all its values in one --sweep " +
                         axes.back().key + "=V1,V2,...");
  }
  double combinations = 1;
  for (const auto& axis : axes) combinations *= static_cast<double>(axis.values.size());
  constexpr double kMaxSweepRows = 10000;  // each row is two replays
  if (combinations > kMaxSweepRows)
    throw UsageError("--sweep asks for " + std::to_string(static_cast<long long>(combinations)) +
                     " combinations, more than the limit of 10000 (each is two simulations)");
  std::vector<std::vector<std::string>> combos = {{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& c : combos)
      for (const auto& v : axis.values) {
        auto d = c;
        d.push_back(v);
        next.push_back(std::move(d));
      }
    combos = std::move(next);
  }
  // Every value of every axis is checked before the first long replay: an unknown key or a
  // value that is not a number (ep=abc), then every combination for a plan too large to build
  // (microbatches=1e9). Settings that merely do not fit together (dp not a multiple of ep) stay
  // cells of the table, each with its reason.
  for (const auto& axis : axes)
    for (const auto& v : axis.values) {
      Setup probe = base;
      apply(probe, axis.key, v);
    }
  for (const auto& combo : combos) {
    Setup s = base;
    std::string label;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      apply(s, axes[k].key, combo[k]);
      label += (label.empty() ? "" : " ") + axes[k].key + "=" + combo[k];
    }
    check_plan_size_of(s, label);
  }
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json_out) {
    for (const auto& axis : axes) std::cout << std::left << std::setw(14) << axis.key;
    std::cout << std::setw(14) << "step(off)" << std::setw(14) << "step(on)" << std::setw(9) << "speedup"
              << std::setw(13) << "a2a(on)" << std::setw(13) << "exposed(on)" << std::setw(10) << "hidden"
              << "bubble(on)\n";
  }
  // Every combination's two replays, in -j worker processes; the rows come back in order.
  std::vector<int> indices(combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) indices[i] = static_cast<int>(i);
  const std::vector<nlohmann::json> cells =
      parallel_map(indices, a.jobs, "sweep: combinations", [&](int i) {
        Setup s = base;
        for (std::size_t k = 0; k < axes.size(); ++k) apply(s, axes[k].key, combos[static_cast<std::size_t>(i)][k]);
        nlohmann::json off, on;
        row_cell([&] { return simulate(with_overlap(s, a.schedule, false), ro, false); }, off);
        row_cell([&] { return simulate(with_overlap(s, a.schedule, true), ro, false); }, on);
        return nlohmann::json{{"off", off}, {"on", on}};
      });
  for (std::size_t i = 0; i < combos.size(); ++i) {
    const nlohmann::json& off = cells[i]["off"];
    const nlohmann::json& on = cells[i]["on"];
    nlohmann::json row;
    for (std::size_t k = 0; k < axes.size(); ++k) row[axes[k].key] = combos[i][k];
    row["overlap_off"] = off;
    row["overlap_on"] = on;
    rows.push_back(row);
    if (a.json_out) continue;
    auto cell = [](const nlohmann::json& r) { return r.contains("step_time_s") ? ms(r["step_time_s"].get<double>()) : "n/a"; };
    for (const auto& v : combos[i]) std::cout << std::setw(14) << v;
    std::cout << std::setw(14) << cell(off) << std::setw(14) << cell(on);
    if (on.contains("step_time_s") && off.contains("step_time_s")) {
      std::ostringstream sp;
      sp << std::fixed << std::setprecision(3) << off["step_time_s"].get<double>() / on["step_time_s"].get<double>() << "x";
      std::cout << std::setw(9) << sp.str() << std::setw(13) << ms(on["a2a_total_s"].get<double>()) << std::setw(13)
                << ms(on["a2a_exposed_s"].get<double>()) << std::setw(10) << pct(on["a2a_hidden_fraction"].get<double>())
                << pct(on["bubble_fraction"].get<double>());
    } else {
      std::cout << std::setw(9) << "-";
      if (!on.contains("step_time_s")) std::cout << "  (overlap on: " << on["error"].get<std::string>() << ")";
      if (!off.contains("step_time_s")) std::cout << "  (overlap off: " << off["error"].get<std::string>() << ")";
    }
    std::cout << "\n" << std::flush;
  }
  if (a.json_out) std::cout << rows.dump(2) << "\n";
  // A sweep in which nothing ran is bad input, not an answer.
  for (const nlohmann::json& c : cells)
    if (c["off"].contains("step_time_s") || c["on"].contains("step_time_s")) return 0;
  const nlohmann::json& first = cells.front()["off"];
  io::log::say("error") << "every combination of the sweep failed (the first: "
                        << (first.contains("error") ? first["error"].get<std::string>() : std::string("no result"))
                        << ")";
  return 2;
}

int run_compare_grouping(const Setup& base, const SimulateArgs& a, const sim::ReplayOptions& ro) {
  const std::string flat = ht::patterns::to_string(ht::patterns::flatten(base.parsed()));
  nlohmann::json out;
  struct Column {
    std::string name;
    Setup setup;
  };
  std::vector<Column> columns;
  for (const auto& [tag, pattern] : {std::pair{"grouped", base.pattern}, std::pair{"flattened", flat}}) {
    Setup s = base;
    s.pattern = pattern;
    columns.push_back({std::string(tag) + " off", with_overlap(s, a.schedule, false)});
    columns.push_back({std::string(tag) + " on", with_overlap(s, a.schedule, true)});
  }
  std::vector<nlohmann::json> results;
  io::log::Progress progress("progress");
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < columns.size(); ++i) {
    progress.draw("[" + std::to_string(i + 1) + "/" + std::to_string(columns.size()) + "] " + columns[i].name +
                      " overlap",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    nlohmann::json r;
    row_cell([&] { return simulate(columns[i].setup, ro, false); }, r);
    results.push_back(r);
    out[columns[i].name] = r;
  }
  progress.clear();
  out["grouped_pattern"] = base.pattern;
  out["flattened_pattern"] = flat;
  if (a.json_out) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "grouped   '" << base.pattern << "'\nflattened '" << flat << "'\n\n" << std::left << std::setw(22)
            << "overlap:";
  for (const auto& c : columns) std::cout << std::setw(16) << c.name;
  std::cout << "\n";
  const std::vector<std::pair<std::string, std::string>> metrics = {
      {"step_time_s", "step time"}, {"compute_busy_s", "compute busy"}, {"a2a_total_s", "all-to-all"},
      {"a2a_exposed_s", "exposed all-to-all"}, {"a2a_hidden_fraction", "hidden"}, {"bubble_fraction", "bubble"}};
  for (const auto& [key, title] : metrics) {
    std::cout << std::setw(22) << title;
    for (const auto& r : results) {
      if (!r.contains(key)) std::cout << std::setw(16) << "n/a";
      else if (key.find("fraction") != std::string::npos) std::cout << std::setw(16) << pct(r[key].get<double>());
      else std::cout << std::setw(16) << ms(r[key].get<double>());
    }
    std::cout << "\n";
  }
  for (std::size_t i = 0; i < results.size(); ++i)
    if (results[i].contains("error")) std::cout << columns[i].name << ": " << results[i]["error"].get<std::string>() << "\n";
  return 0;
}

int run(const SimulateArgs& a) {
  const TrainBudget budget = a.train.resolve();
  if (budget.asked() && (!a.sweeps.empty() || a.compare_grouping))
    throw UsageError("--train-tokens applies to one run, not to --sweep or --compare-grouping");
  Setup s;
  const hs::ModelCard card = a.model.resolve_card();
  s.model = card.name;
  s.pattern = !a.pattern.empty() ? a.pattern : card.pattern;
  if (s.pattern.empty())
    throw UsageError("give a pattern (PATTERN or --pattern) or a model card (--model NAME; `hybrid-twin models` lists them)");
  s.dims = card.dims;
  s.parallel = a.layout.resolve(s.dims);
  s.options = a.schedule.resolve(s.parallel, s.parsed().mtp_depths);
  s.platform = sim::parse_platform(a.platform);
  a.physics.apply(s.options);
  s.memory_margin = a.physics.memory_margin_gib * kGiB;
  sim::place(s.options, s.platform);
  if (s.options.precision == hs::Precision::Mxfp8 && !s.platform.gpu.mxfp8)
    throw UsageError("--precision mxfp8 needs a GPU with MXFP8 GEMMs (dgx-b200, gb200-nvl72); '" + s.platform.name +
                     "' has none (use --precision fp8)");
  if (!a.costs_file.empty()) s.costs = sim::load_costs_file(a.costs_file);
  sim::apply_kernel_table(s.platform, s.costs);
  for (const auto& kv : a.cost_overrides) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw UsageError("--cost expects KEY=VALUE, got '" + kv + "'");
    sim::set_cost_key(s.costs, kv.substr(0, eq), kv.substr(eq + 1));
  }
  sim::ReplayOptions ro;
  ro.a2a = sim::parse_a2a_model(a.a2a_model);
  ro.pairwise_max_group = a.pairwise_max_group;
  s.options.fold = !a.no_fold;
  if (!a.sweeps.empty() || a.compare_grouping) {
    if (!a.trace_out.empty() || !a.svg_out.empty())
      throw UsageError("--trace and --svg describe one run; they cannot be combined with --sweep or --compare-grouping");
    if (!a.sweeps.empty() && a.compare_grouping)
      throw UsageError("--sweep and --compare-grouping cannot be combined");
    return a.compare_grouping ? run_compare_grouping(s, a, ro) : run_sweep(s, a, ro);
  }
  // Output locations are checked before the replay, which may take minutes.
  io::check_distinct_outputs({{a.trace_out, "--trace"}, {a.svg_out, "--svg"}});
  if (!a.trace_out.empty()) io::check_output_file(a.trace_out, "trace");
  if (!a.svg_out.empty()) io::check_output_file(a.svg_out, "SVG");
  const bool timeline = !a.trace_out.empty() || !a.svg_out.empty();
  Run r = simulate(s, ro, timeline);
  if (!a.trace_out.empty()) {
    ht::traces::write_chrome_trace(r.result.timeline, a.trace_out);
    io::log::Line("wrote", false) << "wrote " << a.trace_out << " (" << r.result.timeline.spans.size() << " spans)";
  }
  if (!a.svg_out.empty()) {
    ht::traces::write_svg(r.result.timeline, a.svg_out);
    io::log::Line("wrote", false) << "wrote " << a.svg_out;
  }
  if (a.json_out) {
    nlohmann::json j = summary_json(r);
    if (budget.asked()) j["train"] = budget.json(tokens_per_s(r), r.layout.global_ranks());
    std::cout << j.dump(2) << "\n";
  } else {
    print_run(s, r, budget);
  }
  return 0;
}

const Registration reg{{
    "simulate",
    "Predict step time and hidden all-to-all on a simulated cluster (SimGrid twin); what-if sweeps",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<SimulateArgs>();
      sub.add_option("--pattern,PATTERN", a->pattern,
                     "hybrid layer pattern, e.g. 'M[*E]M[*E]' (default: the model card's)");
      add_model_flags(sub, a->model);
      add_layout_flags(sub, a->layout);
      add_megatron_args_flag(sub);
      add_schedule_flags(sub, a->schedule);
      add_physics_flags(sub, a->physics);
      const char* twin = "Twin";
      sub.add_option("--platform", a->platform,
                     "PRESET[:key=value,...] (presets dgx-h100, dgx-h200, dgx-h800, dgx-b200, gb200-nvl72) or FILE.xml[:key=value,...]; keys: "
                     "nodes, gpus_per_node, nvlink_gbps (GB/s), ib_gbps (Gb/s), *_latency_us, *_efficiency, "
                     "peak_tflops, hbm_tbps, oversubscription")
          ->capture_default_str()
          ->group(twin);
      sub.add_option("--costs", a->costs_file, "cost model JSON (launch overheads, interference, measured durations)")
          ->check(CLI::ExistingFile)
          ->group(twin);
      sub.add_option("--cost", a->cost_overrides,
                     "KEY=VALUE cost override (launch_overhead_us, host_launch_us, grouped_launch_us, comm_launch_us, "
                     "interference_factor, wake_latency_us); repeatable")
          ->group(twin);
      sub.add_option("--a2a-model", a->a2a_model, "all-to-all flows: auto, pairwise or aggregated")
          ->check(CLI::IsMember({"auto", "pairwise", "aggregated"}))
          ->capture_default_str()
          ->group(twin);
      sub.add_option("--pairwise-max-group", a->pairwise_max_group,
                     "auto: pairwise flows for collectives of at most this many ranks")
          ->check(kPositive)
          ->capture_default_str()
          ->group(twin);
      sub.add_flag("--no-fold", a->no_fold,
                   "simulate every rank (default: ranks with the same work and transfers are simulated once)")
          ->group(twin);
      sub.add_option("--trace", a->trace_out, "write the predicted timeline as Chrome-trace JSON")->check(kOutputPath)->group(twin);
      sub.add_option("--svg", a->svg_out, "write the predicted timeline as SVG")->check(kOutputPath)->group(twin);
      sub.add_flag("--json", a->json_out, "print results as JSON");
      sub.add_option("--sweep", a->sweeps,
                     "KEY=V1,V2,... (repeatable: cartesian product); keys: pattern, ep, pp, vpp, dp, microbatches, "
                     "routing_skew, expert_load, expert_node_load, cost keys, platform keys, model fields. One row per "
                     "combination, overlap off and on side by side")
          ->group(twin);
      sub.add_option("-j,--jobs", a->jobs, "--sweep: worker processes")
          ->check(CLI::Range(1, 256))
          ->capture_default_str()
          ->group(twin);
      add_train_budget_flags(sub, a->train);
      sub.add_flag("--compare-grouping", a->compare_grouping,
                   "simulate the pattern and its flattened form (groups dissolved), overlap off and on")
          ->group(twin);
      return [a] { return run(*a); };
    },
    30}};

}  // namespace
}  // namespace ht::cli
