// `hybrid-twin search`: which layout should I run? Enumerates Megatron layouts of a model on a
// platform (TP, CP, PP, VPP, EP, ETP, MBS, recomputation, overlap on and off), drops the ones the
// layout rules refuse and the ones that do not fit in memory (counting why), orders the rest by a
// lower bound on the step (the busiest rank's kernels alone), simulates them in that order and
// stops where the bound passes the K-th best step found. -j N runs N worker processes;
// --emit-jobs writes one `simulate` command per layout for other machines, and `hybrid-twin
// merge` joins their JSON into the same table.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include <sys/mman.h>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/model_card.hpp"
#include "ht/schedule/pipeline_order.hpp"
#include "model_flags.hpp"
#include "megatron_args.hpp"
#include "merge_schema.hpp"
#include "process_pool.hpp"
#include "whatif.hpp"

namespace ht::cli {
namespace {

// One point of the search space.
struct Candidate {
  int tp = 1, cp = 1, pp = 1, vpp = 0, ep = 1, etp = 1, mbs = 1;
  std::string recompute = "none";
  bool overlap = false;
};

struct SearchArgs {
  ModelFlags model;
  std::string pattern;
  std::string platform = "dgx-h100";
  int gpus = 0, gbs = 0, top = 10, jobs = 1;
  std::vector<int> tp{1, 2, 4, 8}, cp{1}, pp{1, 2, 4, 8}, vpp{0, 2, 3, 4}, ep, etp{1}, mbs{1, 2};
  std::vector<std::string> recompute{"none", "layernorm,moe_act", "full"};
  std::vector<std::string> overlap{"off", "on"};
  std::string offload = "none";  // --offload-modules, for every layout
  bool json_out = false, no_prune = false;
  std::string emit_jobs, jobs_dir = "search-results", bin = "hybrid-twin";
  PhysicsFlags physics;
  hs::PipelineSplit split;  // uneven first/last stages, applied to every layout with pp > 1
  TrainBudgetFlags train;
};

// The setup of one candidate; throws ScheduleError naming the rule it breaks.
Setup setup_of(const Setup& base, const SearchArgs& a, const Candidate& c) {
  Setup s = base;
  s.dims.micro_batch = c.mbs;
  hs::ParallelConfig cfg;
  // simulate's defaults: Megatron's DDP with the distributed optimizer and both overlaps.
  cfg.optimizer.sync = hs::GradSync::Megatron;
  cfg.optimizer.distributed = true;
  cfg.optimizer.overlap_grad_reduce = true;
  cfg.optimizer.overlap_param_gather = true;
  cfg.recompute = hs::parse_recompute(c.recompute);
  cfg.offload = hs::parse_offload(a.offload);
  if (c.pp > 1) cfg.split = a.split;
  hs::LayoutRequest r;
  r.gpus = a.gpus, r.gbs = a.gbs, r.tp = c.tp, r.cp = c.cp, r.pp = c.pp, r.vpp = c.vpp, r.ep = c.ep, r.etp = c.etp;
  s.parallel = hs::resolve_layout(r, s.dims, cfg);
  hs::check_layout(s.parsed(), s.dims, s.parallel);
  s.options = hs::ScheduleOptions{};
  s.options.overlap = c.overlap;
  s.options.delay_wgrad = c.overlap && !s.parallel.optimizer.fsdp;  // Megatron-FSDP refuses delayed wgrad
  s.options.fold = true;
  a.physics.apply(s.options);
  return s;
}

// A refusal's rule: its message with the numbers taken out, so that one rule counts once.
std::string rule_of(const std::string& message) {
  static const std::regex numbers("\\b[0-9]+(\\.[0-9]+)?\\b");
  std::string m = std::regex_replace(message, numbers, "N");
  return m.size() > 110 ? m.substr(0, 107) + "..." : m;
}

// Seconds a node takes at least, alone on its GPU: a compute node its kernels (or the host that
// launches them); a transfer its bytes over the sender's own NVLink or NIC port, uncontended, a
// ring collective's volume split over NVLink and the NIC as the replay's rings split it.
// Compute seconds are cached per (work, phase), as the replay does: many nodes share a work.
double node_floor(const Setup& s, const hs::Plan& plan, const hs::Node& n, std::map<std::pair<int, int>, double>& cache) {
  double cost = 0;
  if (n.stream == hs::Stream::Compute && n.part != hs::Part::TpGather && n.part != hs::Part::TpScatter &&
      n.part != hs::Part::CpExchange) {
    const hs::Work* work = n.work >= 0 ? &plan.works[static_cast<std::size_t>(n.work)] : nullptr;
    if (work == nullptr || !s.costs.measured_s.empty()) {
      cost = s.costs.compute_seconds(n, s.platform.gpu, work, plan.delay_wgrad, plan.cuda_graphs);
    } else {
      const auto key = std::make_pair(n.work, static_cast<int>(n.phase));
      const auto it = cache.find(key);
      cost = it != cache.end() ? it->second
                               : (cache[key] = s.costs.compute_seconds(n, s.platform.gpu, work, plan.delay_wgrad,
                                                                       plan.cuda_graphs));
    }
  }
  if (n.sends.empty()) return cost;
  const int me = plan.original_rank(n.rank), per_node = std::max(1, s.platform.gpus_per_node);
  double intra = 0, inter = 0;
  for (const auto& t : n.sends)
    if (t.peer != me) (t.peer / per_node == me / per_node ? intra : inter) += t.bytes;
  const hs::Collective* col = n.collective >= 0 ? &plan.collectives[static_cast<std::size_t>(n.collective)] : nullptr;
  if (col != nullptr && (col->kind == hs::CollectiveKind::AllReduce || col->kind == hs::CollectiveKind::AllGather ||
                         col->kind == hs::CollectiveKind::ReduceScatter)) {
    std::vector<int> members = col->ranks;
    if (members.empty())
      for (int id : col->nodes) members.push_back(plan.original_rank(plan.node(id).rank));
    double local = 0;
    bool spans = false;
    for (int r : members) {
      local += r / per_node == me / per_node;
      spans = spans || r / per_node != me / per_node;
    }
    const double volume = intra + inter;
    inter = spans ? volume / local : 0;
    intra = volume - inter;
  }
  return std::max({cost, intra / s.platform.nvlink_effective(), inter / s.platform.nic_effective()});
}

// A lower bound on the step of a plan built with `short_microbatches` of the layout's
// `microbatches` (every microbatch runs the same nodes, so a rank's work of m microbatches is its
// microbatch nodes' work times m / m'). Per pipeline rank r:
//  - busy: its compute stream's nodes at their floors; without the EP overlap a microbatch's
//    compute waits for each of its all-to-alls, so those count too (with it: the larger of
//    compute and all-to-all); its other streams' totals bound it as well. A comm kernel holds s
//    of the S SMs while it runs and the GPU's clock drops to overlap_clock c: overlapped, it
//    slows the compute beside it by 1 - c (S - s)/S of its time; alone, it adds all of its time.
//    Either way a comm stream of total C adds at least (C - W)(1 - c (S - s)/S) to the compute
//    stream's work, W the time the compute stream waits anyway (the fill, the all-to-alls it
//    waits for), where communication costs it nothing (the largest such term is taken: comm
//    kernels may overlap each other);
//  - fill: its first forward (microbatch 0, chunk 0) needs its own first parameter gather and
//    every earlier stage's forward of that chunk, each stage starting once its own gather is in
//    (the gathers of all stages run at once from the step's start); drain: after its last backward
//    (the last microbatch's chunk 0) every earlier stage runs that chunk's backward in turn.
//  - with the overlap, the warm-up steps run forward chunks alone and the cool-down steps
//    backward chunks alone: their all-to-alls leave the compute stream waiting;
//  - the data-parallel step: after the last backward the last gradient reduction runs, then the
//    optimizer step.
// step >= max over r of fill + busy and of fill + microbatch work + the larger of the drain and
// the last reduction plus the optimizer (weight gradients and the optimizer are not followed by
// the drain).
double stage_bound(const Setup& s, const hs::Plan& plan, int microbatches, int short_microbatches) {
  const double scale = double(microbatches) / short_microbatches;
  struct Rank {
    int pp = 0;
    double compute = 0, compute_mb = 0, a2a = 0, streams[3] = {0, 0, 0}, first_forward = 0, last_backward = 0;
    std::map<std::pair<int, bool>, double> chunk_a2a;  // (vp stage, backward) -> one chunk's all-to-alls
    double first_gather = 0, last_reduce = 0, optimizer = 0;  // the data-parallel step around the microbatches
  };
  std::vector<Rank> ranks(plan.ranks.size());
  std::map<std::pair<int, int>, double> cache;
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    Rank& rk = ranks[r];
    rk.pp = plan.ranks[r].pp_rank;
    // The first forward waits for the first parameter gather issued on the dp stream; the
    // optimizer step waits for the last gradient reduction, which waits for the last backward.
    bool first = true;
    for (int id : plan.ranks[r].issue) {
      const hs::Node& n = plan.node(id);
      if (n.stream != hs::Stream::Dp) continue;
      if (first && n.slot == hs::Slot::ParamGather) rk.first_gather = node_floor(s, plan, n, cache);
      first = false;
      if (n.slot == hs::Slot::GradAllReduce) rk.last_reduce = node_floor(s, plan, n, cache);
    }
  }
  for (const hs::Node& n : plan.nodes) {
    Rank& rk = ranks[static_cast<std::size_t>(n.rank)];
    const bool per_mb = n.microbatch >= 0;
    const double cost = node_floor(s, plan, n, cache) * (per_mb ? scale : 1.0);
    rk.streams[static_cast<int>(n.stream)] += cost;
    const bool a2a = n.stream == hs::Stream::Comm && (n.slot == hs::Slot::Dispatch || n.slot == hs::Slot::Combine);
    if (n.stream == hs::Stream::Compute) rk.compute += cost;
    if (n.slot == hs::Slot::OptimizerStep) rk.optimizer += cost;
    if (a2a) rk.a2a += cost;
    if (n.stream == hs::Stream::Compute || (a2a && !plan.overlap))
      if (per_mb && n.phase != hs::Phase::Weight) rk.compute_mb += cost;
    // The first microbatch's chunk 0 (the same work as every microbatch's): its forward chain
    // and its backward chain, compute and all-to-alls.
    if (n.microbatch == 0 && a2a && n.phase != hs::Phase::Recompute)
      rk.chunk_a2a[{n.vp_stage, n.phase == hs::Phase::Backward}] += cost / scale;
    if (n.microbatch == 0 && n.vp_stage == 0 && (n.stream == hs::Stream::Compute || a2a)) {
      const double once = cost / scale;
      if (n.phase == hs::Phase::Forward) rk.first_forward += once;
      else if (n.phase == hs::Phase::Backward) rk.last_backward += once;
    }
  }
  // Per pipeline rank: chunk 0's forward and backward (the slowest of its ranks) and the earliest
  // first parameter gather of its ranks.
  struct Stage {
    double forward = 0, backward = 0, gather = std::numeric_limits<double>::infinity();
  };
  std::map<int, Stage> stage;
  for (const Rank& rk : ranks) {
    Stage& st = stage[rk.pp];
    st.forward = std::max(st.forward, rk.first_forward);
    st.backward = std::max(st.backward, rk.last_backward);
    st.gather = std::min(st.gather, rk.first_gather);
  }
  // The earliest the first activation reaches each pipeline rank: every rank's gathers start with
  // the step, so a stage starts once its own gather and the activation from the stage before it
  // are in; a rank's fill is then the later of its own gather and that arrival (the gathers of
  // all stages run at once: adding them to the upstream forwards passed the step by 6 %).
  std::map<int, double> arrival;
  double reach = 0;
  for (const auto& [pp, st] : stage) {
    arrival[pp] = reach;
    reach = std::max(st.gather, reach) + st.forward;
  }
  double bound = 0;
  for (const Rank& rk : ranks) {
    double fill = std::max(rk.first_gather, arrival[rk.pp]), drain = 0;
    for (const auto& [pp, st] : stage)
      if (pp < rk.pp) drain += st.backward;
    const double ep_sms = plan.ep_comm_sms > 0 ? plan.ep_comm_sms : s.platform.gpu.nccl_sms;
    // x seconds of compute beside a comm kernel cost the compute stream x (1 - speed) more than
    // alone (the replay's own speed_beside_comm), and a comm kernel alone adds all of x.
    const auto lost = [&](double held) { return 1 - sim::speed_beside_comm(s.costs, s.platform, held); };
    // With the overlap, a warm-up step runs a forward chunk alone and a cool-down step a
    // backward chunk alone: the compute stream's next node waits for each of their all-to-alls.
    double alone = 0;
    if (plan.overlap) {
      hs::ParallelConfig full = s.parallel;
      full.microbatches = microbatches;
      const int warm = hs::warmup_microbatches(full, rk.pp, true);
      const int total = microbatches * full.model_chunks();
      for (int k = 0; k < warm && k < total; ++k) {
        const auto f = rk.chunk_a2a.find({hs::forward_chunk(full, k).vp_stage, false});
        const auto b = rk.chunk_a2a.find({hs::backward_chunk(full, total - 1 - k).vp_stage, true});
        alone += (f != rk.chunk_a2a.end() ? f->second : 0.0) + (b != rk.chunk_a2a.end() ? b->second : 0.0);
      }
    }
    // Communication that runs while the compute stream waits anyway (the fill, the all-to-alls
    // it waits for) costs the compute nothing: only the rest is priced beside compute. The
    // all-to-alls the compute stream waits for run alone; the rest of them beside compute.
    const double waits = fill + (plan.overlap ? alone : rk.a2a);
    const double shared = std::max(plan.overlap ? std::max(0.0, rk.a2a - alone) * lost(ep_sms) : 0.0,
                                   std::max(0.0, rk.streams[2] - waits) * lost(s.platform.gpu.nccl_sms));
    const double busy = plan.overlap ? std::max(rk.compute + shared + alone, rk.a2a) : rk.compute + rk.a2a + shared;
    const double after = std::max(drain, rk.last_reduce + rk.optimizer);
    bound = std::max({bound, fill + busy, fill + rk.compute_mb + after, rk.streams[0], rk.streams[1], rk.streams[2]});
  }
  return bound;
}

// Phase 1 of one candidate: refused (with the reason), does not fit (with its memory), or the
// lower bound on its step (stage_bound). Both come from a plan of saturated_microbatches, which
// reaches the full plan's memory peak (schedule/memory.hpp) at a fraction of its size.
nlohmann::json assess(const Setup& base, const SearchArgs& a, const Candidate& c) {
  try {
    Setup s = setup_of(base, a, c);
    const auto& parsed = s.parsed();
    // The schedule's rules first (what build_plan checks), so that refusals count the same;
    // then state alone too large needs no plan to know.
    hs::check_schedule_config(parsed, s.dims, s.parallel, build_options(s));
    const double state = hs::state_memory(parsed, s.dims, s.parallel, s.options.precision);
    // What the tensors may use: the HBM less the process's runtime overhead and the margin.
    const double usable = s.platform.gpu.hbm_bytes - s.memory_margin -
                          hs::runtime_overhead(parsed, s.dims, s.parallel, s.options.dispatcher).total();
    if (state > usable) return {{"status", "memory"}, {"memory_gib", state / kGiB}};
    const int microbatches = s.parallel.microbatches;
    s.parallel.microbatches = hs::saturated_microbatches(s.parallel, s.options.overlap);
    const hs::Plan plan = hs::build_plan(parsed, s.dims, s.parallel, build_options(s));
    const hs::MemoryBreakdown m = hs::peak_memory(parsed, s.dims, s.parallel, plan, s.options.precision);
    if (m.total() > usable)
      return {{"status", "memory"}, {"memory_gib", m.total() / kGiB}};
    const double bound = stage_bound(s, plan, microbatches, s.parallel.microbatches);
    return {{"status", "ok"}, {"bound_s", bound}, {"memory_gib", m.total() / kGiB}};
  } catch (const std::exception& e) {
    return {{"status", "refused"}, {"reason", rule_of(e.what())}};
  }
}

nlohmann::json simulate_candidate(const Setup& base, const SearchArgs& a, const Candidate& c) {
  try {
    return summary_json(simulate(setup_of(base, a, c), sim::ReplayOptions{}, false, true));
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

// GPU-seconds per token: what a token budget costs on a result's layout.
double gpu_seconds_per_token(const nlohmann::json& r) {
  return r["gpus"].get<double>() / r["tokens_per_s"].get<double>();
}

// Layout results (simulate --json objects) sorted by step time (or, `by_gpu_hours`, by the
// GPU-hours a token budget takes: the order across GPU counts), ties by their layout's text.
void sort_results(std::vector<nlohmann::json>& rows, bool by_gpu_hours = false) {
  std::sort(rows.begin(), rows.end(), [by_gpu_hours](const nlohmann::json& x, const nlohmann::json& y) {
    const double a = by_gpu_hours ? gpu_seconds_per_token(x) : x["step_time_s"].get<double>();
    const double b = by_gpu_hours ? gpu_seconds_per_token(y) : y["step_time_s"].get<double>();
    if (a != b) return a < b;
    return x["layout"].dump() + x["schedule"].dump() < y["layout"].dump() + y["schedule"].dump();
  });
}

void print_table(const std::vector<nlohmann::json>& rows, std::size_t top, const TrainBudget& budget = {}) {
  std::cout << std::left << std::setw(5) << "rank" << std::right;
  for (const char* h : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "mb"}) std::cout << std::setw(5) << h;
  std::cout << "  " << std::left << std::setw(18) << "recompute" << std::setw(8) << "overlap" << std::right
            << std::setw(13) << "step" << std::setw(12) << "tokens/s" << std::setw(8) << "MFU" << std::setw(11)
            << "memory" << std::setw(9) << "hidden";
  if (budget.asked()) {
    std::cout << std::setw(7) << "gpus" << std::setw(9) << "days" << std::setw(12) << "GPU-hours";
    if (budget.gpu_hour_price > 0) std::cout << std::setw(14) << "cost";
  }
  std::cout << "\n";
  for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
    const auto& r = rows[i];
    const auto& l = r["layout"];
    std::cout << std::left << std::setw(5) << i + 1 << std::right;
    for (const char* k : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches"})
      std::cout << std::setw(5) << l[k].get<long long>();
    std::ostringstream tok;
    tok << std::fixed << std::setprecision(0) << r["tokens_per_s"].get<double>();
    std::cout << "  " << std::left << std::setw(18) << l["recompute"].get<std::string>() << std::setw(8)
              << (r["schedule"].get<std::string>() == "sequential" ? "off" : "on") << std::right << std::setw(13)
              << ms(r["step_time_s"].get<double>()) << std::setw(12) << tok.str() << std::setw(8)
              << pct(r["mfu"].get<double>()) << std::setw(11) << gib(r["memory_gib"].get<double>() * kGiB)
              << std::setw(9) << pct(r["a2a_hidden_fraction"].get<double>());
    if (budget.asked()) {
      const nlohmann::json t = budget.json(r["tokens_per_s"].get<double>(), r["gpus"].get<int>());
      std::ostringstream days, hours, cost;
      days << std::fixed << std::setprecision(1) << t["days"].get<double>();
      hours << std::fixed << std::setprecision(0) << t["gpu_hours"].get<double>();
      std::cout << std::setw(7) << r["gpus"].get<int>() << std::setw(9) << days.str() << std::setw(12) << hours.str();
      if (budget.gpu_hour_price > 0) {
        cost << std::fixed << std::setprecision(0) << t["cost"].get<double>();
        std::cout << std::setw(14) << cost.str();
      }
    }
    std::cout << "\n";
  }
}

std::vector<Candidate> enumerate(const SearchArgs& a, const Setup& base) {
  const auto& parsed = base.parsed();
  const bool moe = base.pattern.find('E') != std::string::npos;
  std::vector<int> eps = a.ep;
  if (eps.empty()) {
    eps.push_back(1);
    if (moe)
      for (long long e = 2; e <= base.dims.num_experts && e <= a.gpus; e *= 2)
        if (base.dims.num_experts % e == 0) eps.push_back(static_cast<int>(e));
  }
  std::vector<Candidate> out;
  for (int tp : a.tp)
    for (int cp : a.cp)
      for (int pp : a.pp)
        for (int vpp : a.vpp) {
          if (pp == 1 && vpp > 0) continue;
          if (static_cast<long long>(tp) * cp * pp > a.gpus || a.gpus % (tp * cp * pp) != 0) continue;
          for (int ep : eps)
            for (int etp : a.etp)
              for (int mbs : a.mbs)
                for (const auto& rc : a.recompute)
                  for (const auto& ov : a.overlap) {
                    const bool on = ov == "on";
                    if (on && (ep == 1 || parsed.mtp_depths > 0)) continue;  // nothing to hide, or rule O3
                    out.push_back({tp, cp, pp, vpp, ep, etp, mbs, rc, on});
                  }
        }
  return out;
}

// The `simulate` command that gives one candidate's result (--emit-jobs).
// One word for a POSIX shell, whatever its bytes: single-quoted, each ' written as '\''. Every
// value a job line takes from the user goes through it (the job file is handed to a scheduler).
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The shortest decimal that reads back as exactly `x` (std::to_string keeps 6 decimals and would
// give an emitted command another physics than the search priced).
std::string exact(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string job_command(const SearchArgs& a, const Setup& base, const Candidate& c, const std::string& out) {
  std::ostringstream o;
  o << "mkdir -p -- " << shell_quote(a.jobs_dir) << " && " << shell_quote(a.bin) << " simulate";
  if (!a.model.model_file.empty()) o << " --model " << shell_quote(a.model.model_file);
  if (a.model.preset != "default") o << " --preset " << shell_quote(a.model.preset);
  for (const auto& [name, option] : a.model.options)
    if (option->count() > 0) o << " --" << name << " " << a.model.values.at(name);
  if (!a.pattern.empty()) o << " --pattern " << shell_quote(base.pattern);
  o << " --platform " << shell_quote(a.platform) << " --gpus " << a.gpus << " --gbs " << a.gbs << " --tp " << c.tp
    << " --cp " << c.cp << " --pp " << c.pp << " --vpp " << c.vpp << " --ep " << c.ep << " --etp " << c.etp << " --mbs "
    << c.mbs << " --recompute " << shell_quote(c.recompute) << (c.overlap ? " --overlap" : " --no-overlap")
    << " --moe-dispatcher " << a.physics.dispatcher << " --routing " << a.physics.routing << " --precision "
    << a.physics.precision << " --moe-dispatch-dtype " << a.physics.dispatch_dtype
    << (a.physics.tp_comm_overlap ? " --tp-comm-overlap" : "")
    << (a.physics.cross_entropy_fusion ? " --cross-entropy-fusion" : "")
    << (a.offload != "none" ? " --offload-modules " + shell_quote(a.offload) : "")
    << (a.physics.memory_margin_gib > 0 ? " --memory-margin " + shell_quote(exact(a.physics.memory_margin_gib)) : "")
    << (a.physics.expert_load > 0 ? " --expert-load " + shell_quote(exact(a.physics.expert_load)) : "")
    << (a.physics.expert_node_load > 0 ? " --expert-node-load " + shell_quote(exact(a.physics.expert_node_load)) : "");
  if (c.pp > 1 && a.split.first_stage_layers >= 0) o << " --first-stage-layers " << a.split.first_stage_layers;
  if (c.pp > 1 && a.split.last_stage_layers >= 0) o << " --last-stage-layers " << a.split.last_stage_layers;
  o << " --json > " << shell_quote(out);
  return o.str();
}

int run_search(const SearchArgs& a) {
  const TrainBudget budget = a.train.resolve();
  if (a.gpus <= 0) throw UsageError("--gpus = " + std::to_string(a.gpus) + ": search needs --gpus N >= 1");
  if (a.gbs <= 0)
    throw UsageError("--gbs = " + std::to_string(a.gbs) + ": search needs --gbs G >= 1 (global batch in sequences)");
  if (a.top < 1) throw UsageError("--top must be at least 1");
  if (a.jobs < 1 || a.jobs > 256) throw UsageError("-j must be between 1 and 256");
  // Each size in the lists where it enters: a zero would divide the world by zero below.
  // A value listed twice would search (and list) its layouts twice.
  const auto once = [](const auto& list, const char* flag) {
    for (std::size_t i = 0; i < list.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (list[i] == list[j]) {
          std::ostringstream v;
          v << list[i];
          throw UsageError(std::string(flag) + " holds '" + v.str() + "' twice; list each value once");
        }
  };
  const auto at_least = [&](const std::vector<int>& list, const char* flag, int min) {
    for (int v : list)
      if (v < min)
        throw UsageError(std::string(flag) + " holds " + std::to_string(v) + "; every value must be >= " +
                         std::to_string(min));
    once(list, flag);
  };
  at_least(a.tp, "--tp-list", 1);
  at_least(a.cp, "--cp-list", 1);
  at_least(a.pp, "--pp-list", 1);
  at_least(a.vpp, "--vpp-list", 0);
  at_least(a.ep, "--ep-list", 1);
  at_least(a.etp, "--etp-list", 1);
  at_least(a.mbs, "--mbs-list", 1);
  once(a.recompute, "--recompute-list");
  once(a.overlap, "--overlap-list");
  (void)hs::parse_offload(a.offload);  // a bad module is the command's error, not every layout's refusal
  if (a.jobs_dir.empty()) throw UsageError("--jobs-dir is empty");
  // The emitted commands run under a shell, one per line: the program and the folder must be a
  // name a shell line can hold (quoted), and the folder must not be the jobs file itself.
  if (!a.emit_jobs.empty()) {
    if (a.bin.empty()) throw UsageError("--bin is empty; name the hybrid-twin the emitted commands call");
    for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"--bin", a.bin}, {"--jobs-dir", a.jobs_dir}})
      for (unsigned char ch : value)
        if (ch < 0x20 || ch == 0x7f)
          throw UsageError(std::string(flag) + " '" + value +
                           "' holds a control character; the jobs file holds one command per line");
    io::check_distinct_outputs({{a.emit_jobs, "--emit-jobs"}, {a.jobs_dir, "--jobs-dir"}});
  }
  Setup base;
  const hs::ModelCard card = a.model.resolve_card();
  base.model = card.name;
  base.pattern = !a.pattern.empty() ? a.pattern : card.pattern;
  if (base.pattern.empty()) throw UsageError("give a model card (--model NAME) or a pattern (--pattern)");
  base.dims = card.dims;
  base.platform = sim::parse_platform(a.platform);
  base.memory_margin = a.physics.memory_margin_gib * kGiB;
  if (!a.emit_jobs.empty()) io::check_output_file(a.emit_jobs, "jobs file");

  const std::vector<Candidate> all = enumerate(a, base);
  if (all.size() > 200000) throw UsageError("the search space holds " + std::to_string(all.size()) +
                                            " layouts, more than the limit of 200000; narrow the --*-list options");
  std::vector<int> indices(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) indices[i] = static_cast<int>(i);
  io::log::say("search") << all.size() << " layouts of " << (base.model.empty() ? base.pattern : base.model) << " on "
                         << a.gpus << " GPUs (" << base.platform.name << "), global batch " << a.gbs;
  const auto assessed = parallel_map(indices, a.jobs, "checking layouts",
                                     [&](int i) { return assess(base, a, all[static_cast<std::size_t>(i)]); });
  std::map<std::string, int> refused;
  int too_big = 0;
  double smallest_too_big = 0;
  std::vector<int> ok;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& r = assessed[i];
    const std::string status = r["status"];
    if (status == "refused") ++refused[r["reason"].get<std::string>()];
    else if (status == "memory") {
      const double g = r["memory_gib"].get<double>();
      smallest_too_big = too_big == 0 ? g : std::min(smallest_too_big, g);
      ++too_big;
    } else ok.push_back(static_cast<int>(i));
  }
  int n_refused = 0;
  for (const auto& [_, n] : refused) n_refused += n;
  {
    io::log::Line line("search");
    line << n_refused << " refused by the layout rules, " << too_big << " do not fit in " << std::fixed
         << std::setprecision(1) << base.platform.gpu.hbm_bytes / kGiB << " GiB of HBM beside the runtime overhead";
    if (base.memory_margin > 0) line << " and the " << base.memory_margin / kGiB << " GiB margin";
    if (too_big > 0) line << " (the smallest of them needs " << smallest_too_big << " GiB for its tensors)";
    line << ", " << ok.size() << " remain";
  }
  std::vector<std::pair<std::string, int>> reasons(refused.begin(), refused.end());
  std::sort(reasons.begin(), reasons.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  for (std::size_t i = 0; i < reasons.size() && i < 5; ++i)
    io::log::Line("search", false) << "  " << std::setw(6) << reasons[i].second << "  " << reasons[i].first;
  // Nothing left to rank is no answer (as a sweep whose every combination fails).
  if (ok.empty())
    throw UsageError("no layout of the " + std::to_string(all.size()) + " in the search space passes the rules and fits (" +
                     std::to_string(n_refused) + " refused, " + std::to_string(too_big) +
                     " do not fit); widen the lists, add GPUs or lower --memory-margin");

  if (!a.emit_jobs.empty()) {
    io::write_output_file(a.emit_jobs, "jobs file", [&](std::ostream& o) {
      for (std::size_t k = 0; k < ok.size(); ++k) {
        char name[32];
        std::snprintf(name, sizeof name, "/job-%05zu.json", k);
        o << job_command(a, base, all[static_cast<std::size_t>(ok[k])], a.jobs_dir + name) << "\n";
      }
    });
    io::log::Line("wrote", false) << "wrote " << a.emit_jobs << " (" << ok.size()
                                  << " commands; run them anywhere, then `" << a.bin << " merge " << a.jobs_dir
                                  << "/*.json`)";
    return 0;
  }

  // Phase 2: simulate in the order of the bound, each worker taking the next layout as it frees
  // up, and skip a layout whose bound exceeds the K-th best step found so far (it cannot enter
  // the table). The workers share the steps they find through one array in shared memory, so the
  // skipping needs no barrier; the table does not depend on -j (what is skipped could not be in
  // it), only the count of replays may.
  std::sort(ok.begin(), ok.end(), [&](int x, int y) {
    const double bx = assessed[static_cast<std::size_t>(x)]["bound_s"], by = assessed[static_cast<std::size_t>(y)]["bound_s"];
    return bx != by ? bx < by : x < y;
  });
  const std::size_t slots = std::max<std::size_t>(1, ok.size());
  void* shared = mmap(nullptr, slots * sizeof(double), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  auto* steps = static_cast<double*>(shared);
  for (std::size_t i = 0; i < slots; ++i) steps[i] = std::numeric_limits<double>::infinity();
  std::vector<int> order(ok.size());
  for (std::size_t i = 0; i < ok.size(); ++i) order[i] = static_cast<int>(i);
  auto kth_best = [&] {
    std::vector<double> found;
    for (std::size_t i = 0; i < ok.size(); ++i) {
      double v = 0;
      __atomic_load(&steps[i], &v, __ATOMIC_RELAXED);
      if (std::isfinite(v)) found.push_back(v);
    }
    if (found.size() < static_cast<std::size_t>(a.top)) return std::numeric_limits<double>::infinity();
    std::nth_element(found.begin(), found.begin() + (a.top - 1), found.end());
    return found[static_cast<std::size_t>(a.top) - 1];
  };
  const auto got = parallel_map(
      order, a.jobs, "search: simulating",
      [&](int pos) -> nlohmann::json {
        const int i = ok[static_cast<std::size_t>(pos)];
        if (!a.no_prune && assessed[static_cast<std::size_t>(i)]["bound_s"].get<double>() > kth_best())
          return {{"pruned", true}};
        nlohmann::json r = simulate_candidate(base, a, all[static_cast<std::size_t>(i)]);
        if (!r.contains("error")) {
          double step = r["step_time_s"].get<double>();
          __atomic_store(&steps[pos], &step, __ATOMIC_RELAXED);
        }
        return r;
      },
      [](const std::vector<nlohmann::json>& so_far) {
        const nlohmann::json* best = nullptr;
        for (const auto& r : so_far)
          if (r.is_object() && r.contains("step_time_s") &&
              (best == nullptr || r["step_time_s"].get<double>() < (*best)["step_time_s"].get<double>()))
            best = &r;
        if (best == nullptr) return std::string();
        const auto& l = (*best)["layout"];
        return "; best so far tp " + std::to_string(l["tp"].get<int>()) + " pp " + std::to_string(l["pp"].get<int>()) +
               " vpp " + std::to_string(l["vpp"].get<int>()) + " ep " + std::to_string(l["ep"].get<int>()) + ": " +
               ms((*best)["step_time_s"].get<double>());
      });
  munmap(shared, slots * sizeof(double));
  std::vector<nlohmann::json> results;
  std::size_t next = 0;
  int failed = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    if (got[k].contains("pruned")) continue;
    ++next;
    if (got[k].contains("error")) {
      ++failed;
      continue;
    }
    results.push_back(got[k]);
    results.back()["bound_s"] = assessed[static_cast<std::size_t>(ok[k])]["bound_s"];
  }
  sort_results(results);
  io::log::say("search") << "simulated " << next << ", " << ok.size() - next << " pruned by the lower bound"
                         << (failed > 0 ? ", " + std::to_string(failed) + " failed to simulate" : std::string());
  if (results.size() > static_cast<std::size_t>(a.top)) results.resize(static_cast<std::size_t>(a.top));
  add_train_json(results, budget);
  if (a.json_out) {
    nlohmann::json out;
    out["results"] = results;
    out["layouts"] = all.size();
    out["refused"] = n_refused;
    out["refusals"] = refused;
    out["memory_exceeded"] = too_big;
    out["simulated"] = next;
    out["pruned"] = ok.size() - next;
    std::cout << out.dump(2) << "\n";
  } else {
    print_table(results, static_cast<std::size_t>(a.top), budget);
  }
  return 0;
}

struct MergeArgs {
  std::vector<std::string> files;
  int top = 10;
  bool json_out = false;
  TrainBudgetFlags train;
  std::string order = "step";
  bool mix = false;
};

int run_merge(const MergeArgs& a) {
  const TrainBudget budget = a.train.resolve();
  if (a.top < 1) throw UsageError("--top must be at least 1");
  std::vector<nlohmann::json> results;
  int not_fitting = 0, failed = 0, duplicates = 0;
  std::string identity, identity_file;
  nlohmann::json identity_row;
  std::map<std::string, std::pair<double, std::string>> seen;  // result key -> (step, file)
  std::set<std::string> files_seen;
  for (const auto& f : a.files) {
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(std::filesystem::absolute(f, ec), ec).string();
    if (!files_seen.insert(canonical).second) throw UsageError("'" + f + "' is given twice");
    const nlohmann::json j = io::read_json_file(f, 64ull << 20, "simulation result");
    std::vector<nlohmann::json> items;
    if (j.is_object() && j.contains("results") && j["results"].is_array()) items = j["results"].get<std::vector<nlohmann::json>>();
    else items.push_back(j);
    for (const auto& r : items) {
      if (r.is_object() && r.contains("error") && !r.contains("step_time_s")) {
        ++failed;
        continue;
      }
      check_result(f, r, budget.asked() || a.order == "gpu-hours");
      if (r.contains("memory_fits") && r["memory_fits"] == false) {
        ++not_fitting;
        continue;
      }
      // One run's results only: the same model, pattern, cluster, sequence and global batch.
      const std::string id = run_identity(r);
      if (identity.empty()) identity = id, identity_file = f, identity_row = r;
      if (id != identity && !a.mix)
        throw UsageError("'" + f + "' and '" + identity_file + "' are results of different runs (" +
                         identity_difference(r, identity_row) +
                         "); rank them together with --mix");
      // The same result twice (a file given twice, a job run twice) is listed once.
      const std::string key = r["layout"].dump() + r["schedule"].dump() + (r.contains("physics") ? r["physics"].dump() : "") +
                              id;
      const auto [it, fresh] = seen.emplace(key, std::make_pair(r["step_time_s"].get<double>(), f));
      if (!fresh) {
        // The same layout with another step is not a repeat: one of the two was made elsewhere.
        if (it->second.first != r["step_time_s"].get<double>())
          throw UsageError("'" + f + "' and '" + it->second.second + "' hold the same layout with different step times (" +
                           ms(r["step_time_s"].get<double>()) + " vs " + ms(it->second.first) +
                           "); they are not results of one run");
        ++duplicates;
        continue;
      }
      results.push_back(r);
    }
  }
  if (results.empty() && not_fitting == 0 && failed == 0)
    throw UsageError("the files hold no result to rank (an empty 'results' list)");
  sort_results(results, a.order == "gpu-hours");
  io::log::say("merge") << results.size() << " results from " << a.files.size() << " files"
                        << (not_fitting > 0 ? ", " + std::to_string(not_fitting) + " that do not fit left out"
                                            : std::string())
                        << (failed > 0 ? ", " + std::to_string(failed) + " failed runs" : std::string())
                        << (duplicates > 0 ? ", " + std::to_string(duplicates) + " duplicates listed once"
                                           : std::string());
  if (results.size() > static_cast<std::size_t>(a.top)) results.resize(static_cast<std::size_t>(a.top));
  add_train_json(results, budget);
  if (a.json_out) std::cout << nlohmann::json{{"results", results}}.dump(2) << "\n";
  else print_table(results, static_cast<std::size_t>(a.top), budget);
  return 0;
}

const Registration search_reg{{
    "search",
    "Rank the layouts of a model on a cluster: enumerate, drop what breaks a rule or memory, simulate the best",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<SearchArgs>();
      add_model_flags(sub, a->model);
      sub.add_option("--pattern", a->pattern, "hybrid layer pattern (default: the model card's)");
      add_megatron_args_flag(sub);
      sub.add_option("--platform", a->platform, "PRESET[:key=value,...], as for simulate")->capture_default_str();
      sub.add_option("--gpus", a->gpus, "world size")->required();
      sub.add_option("--gbs", a->gbs, "global batch in sequences")->required();
      sub.add_option("--top", a->top, "how many layouts to list")->capture_default_str();
      sub.add_option("-j,--jobs", a->jobs, "worker processes")->capture_default_str();
      sub.add_flag("--json", a->json_out,
                   "print the ranked results (simulate --json objects with the lower bound bound_s) and the counts as JSON");
      add_train_budget_flags(sub, a->train);
      sub.add_flag("--no-prune", a->no_prune, "simulate every layout that passes the rules and fits (no lower-bound pruning)");
      add_physics_flags(sub, a->physics);
      const char* space = "Search space";
      sub.add_option("--tp-list", a->tp, "tensor-parallel sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--cp-list", a->cp, "context-parallel sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--pp-list", a->pp, "pipeline sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--vpp-list", a->vpp, "virtual stages (0 = none)")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--ep-list", a->ep, "expert-parallel sizes (default: powers of 2 dividing the experts)")
          ->delimiter(',')
          ->group(space);
      sub.add_option("--etp-list", a->etp, "expert tensor-parallel sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--decoder-first-pipeline-num-layers,--first-stage-layers", a->split.first_stage_layers,
                     "layers on the first pipeline rank of every layout with pp > 1 (uneven split)")
          ->check(kNonNegative)->group(space);
      sub.add_option("--decoder-last-pipeline-num-layers,--last-stage-layers", a->split.last_stage_layers,
                     "layers on the last pipeline rank of every layout with pp > 1 (uneven split)")
          ->check(kNonNegative)->group(space);
      sub.add_option("--mbs-list", a->mbs, "micro batch sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--recompute-list", a->recompute, "recomputation settings ('none', 'full', module lists; ';'-separated)")
          ->delimiter(';')
          ->capture_default_str()
          ->group(space);
      sub.add_option("--offload-modules", a->offload,
                     "fine-grained activation offloading of every layout (simulate's --offload-modules)")
          ->capture_default_str()
          ->group(space);
      sub.add_option("--overlap-list", a->overlap, "EP overlap settings")
          ->delimiter(',')
          ->check(CLI::IsMember({"off", "on"}))
          ->capture_default_str()
          ->group(space);
      const char* jobs = "Other machines";
      sub.add_option("--emit-jobs", a->emit_jobs,
                     "write one self-contained `simulate` command per layout that passes the rules and fits, instead "
                     "of simulating (GNU parallel, a Slurm array); then `merge`")
          ->check(kOutputPath)
          ->group(jobs);
      sub.add_option("--jobs-dir", a->jobs_dir, "where the emitted commands write their JSON")
          ->check(kOutputPath)->capture_default_str()->group(jobs);
      sub.add_option("--bin", a->bin, "the hybrid-twin the emitted commands call")->capture_default_str()->group(jobs);
      return [a] { return run_search(*a); };
    },
    32}};

const Registration merge_reg{{
    "merge",
    "Join `simulate --json` results (e.g. of `search --emit-jobs` commands) into search's ranked table",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<MergeArgs>();
      sub.add_option("RESULTS", a->files, "JSON files of simulate --json or search --json")->required();
      sub.add_option("--top", a->top, "how many layouts to list")->capture_default_str();
      sub.add_flag("--json", a->json_out, "print the ranked results as JSON");
      sub.add_option("--order", a->order,
                     "step: by step time; gpu-hours: by the GPU-hours a token budget takes (results of different GPU "
                     "counts)")
          ->check(CLI::IsMember({"step", "gpu-hours"}))
          ->capture_default_str();
      sub.add_flag("--mix", a->mix,
                   "rank results of different runs together (models, patterns, clusters, sequence lengths or global "
                   "batches; refused by default)");
      add_train_budget_flags(sub, a->train);
      return [a] { return run_merge(*a); };
    },
    33}};

}  // namespace
}  // namespace ht::cli
