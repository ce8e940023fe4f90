// `hybrid-twin search`: which layout should I run? Enumerates Megatron layouts of a model on a
// platform (TP, CP, PP, VPP, EP, ETP, MBS, recomputation, overlap on and off), drops the ones the
// layout rules refuse and the ones that do not fit in memory (counting why), orders the rest by a
// lower bound on the step (the busiest rank's kernels alone), simulates them in that order and
// stops where the bound passes the K-th best step found. -j N runs N worker processes;
// --emit-jobs writes one `simulate` command per layout for other machines, and `hybrid-twin
// merge` joins their JSON into the same table.
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/model_card.hpp"
#include "model_flags.hpp"
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
  bool json_out = false, no_prune = false;
  std::string emit_jobs, jobs_dir = "search-results", bin = "hybrid-twin";
  PhysicsFlags physics;
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
  hs::LayoutRequest r;
  r.gpus = a.gpus, r.gbs = a.gbs, r.tp = c.tp, r.cp = c.cp, r.pp = c.pp, r.vpp = c.vpp, r.ep = c.ep, r.etp = c.etp;
  s.parallel = hs::resolve_layout(r, s.dims, cfg);
  const auto parsed = ht::patterns::parse(s.pattern);
  hs::check_layout(parsed, s.dims, s.parallel);
  s.options = hs::ScheduleOptions{};
  s.options.overlap = c.overlap;
  s.options.delay_wgrad = c.overlap;
  s.options.fold = true;
  a.physics.apply(s.options);
  s.options.nvlink_domain = s.platform.gpus_per_node;
  return s;
}

// A refusal's rule: its message with the numbers taken out, so that one rule counts once.
std::string rule_of(const std::string& message) {
  static const std::regex numbers("\\b[0-9]+(\\.[0-9]+)?\\b");
  std::string m = std::regex_replace(message, numbers, "N");
  return m.size() > 110 ? m.substr(0, 107) + "..." : m;
}

// Phase 1 of one candidate: refused (with the reason), does not fit (with its memory), or the
// lower bound on its step: the busiest rank's compute nodes priced alone, nothing waited for.
nlohmann::json assess(const Setup& base, const SearchArgs& a, const Candidate& c) {
  try {
    const Setup s = setup_of(base, a, c);
    const auto parsed = ht::patterns::parse(s.pattern);
    const hs::Plan plan = hs::build_plan(parsed, s.dims, s.parallel, build_options(s));
    const hs::MemoryBreakdown m = hs::peak_memory(parsed, s.dims, s.parallel, plan, s.options.precision);
    if (m.total() > s.platform.gpu.hbm_bytes)
      return {{"status", "memory"}, {"memory_gib", m.total() / kGiB}};
    // The longest path through the plan with every compute node at its kernels' time and every
    // transfer at its bytes over the sender's own NVLink or NIC port, uncontended: a node starts
    // after its dependencies and after the node before it on its stream, so no replay can finish
    // sooner (this counts the pipeline's fill and drain too).
    std::vector<std::vector<int>> preds(plan.nodes.size());
    for (const auto& n : plan.nodes) preds[static_cast<std::size_t>(n.id)] = n.deps;
    for (const auto& rp : plan.ranks) {
      std::map<hs::Stream, int> last;
      for (int id : rp.issue) {
        const hs::Stream st = plan.node(id).stream;
        const auto it = last.find(st);
        if (it != last.end()) preds[static_cast<std::size_t>(id)].push_back(it->second);
        last[st] = id;
      }
    }
    std::vector<int> indegree(plan.nodes.size(), 0);
    std::vector<std::vector<int>> succs(plan.nodes.size());
    for (std::size_t i = 0; i < preds.size(); ++i)
      for (int d : preds[i]) {
        succs[static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
        ++indegree[i];
      }
    std::vector<double> finish(plan.nodes.size(), 0);
    std::vector<int> ready;
    for (std::size_t i = 0; i < indegree.size(); ++i)
      if (indegree[i] == 0) ready.push_back(static_cast<int>(i));
    double bound = 0;
    while (!ready.empty()) {
      const int id = ready.back();
      ready.pop_back();
      const hs::Node& n = plan.node(id);
      double start = 0;
      for (int d : preds[static_cast<std::size_t>(id)]) start = std::max(start, finish[static_cast<std::size_t>(d)]);
      double cost = 0;
      if (n.stream == hs::Stream::Compute && n.part != hs::Part::TpGather && n.part != hs::Part::TpScatter &&
          n.part != hs::Part::CpExchange) {
        const hs::Work* work = n.work >= 0 ? &plan.works[static_cast<std::size_t>(n.work)] : nullptr;
        cost = s.costs.compute_seconds(n, s.platform.gpu, work, plan.delay_wgrad, plan.cuda_graphs);
      }
      if (!n.sends.empty()) {
        // A transfer takes at least its bytes over the sender's own port, uncontended; a ring
        // collective's volume splits over NVLink and the NIC as the replay's rings do.
        const int me = plan.original_rank(n.rank), per_node = std::max(1, s.platform.gpus_per_node);
        double intra = 0, inter = 0;
        for (const auto& t : n.sends)
          if (t.peer != me) (t.peer / per_node == me / per_node ? intra : inter) += t.bytes;
        const hs::Collective* col = n.collective >= 0 ? &plan.collectives[static_cast<std::size_t>(n.collective)] : nullptr;
        if (col != nullptr && (col->kind == hs::CollectiveKind::AllReduce || col->kind == hs::CollectiveKind::AllGather ||
                               col->kind == hs::CollectiveKind::ReduceScatter)) {
          std::vector<int> members = col->ranks;
          if (members.empty())
            for (int id2 : col->nodes) members.push_back(plan.original_rank(plan.node(id2).rank));
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
        cost = std::max({cost, intra / s.platform.nvlink_effective(), inter / s.platform.nic_effective()});
      }
      finish[static_cast<std::size_t>(id)] = start + cost;
      bound = std::max(bound, start + cost);
      for (int next : succs[static_cast<std::size_t>(id)])
        if (--indegree[static_cast<std::size_t>(next)] == 0) ready.push_back(next);
    }
    return {{"status", "ok"}, {"bound_s", bound}, {"memory_gib", m.total() / kGiB}};
  } catch (const std::exception& e) {
    return {{"status", "refused"}, {"reason", rule_of(e.what())}};
  }
}

nlohmann::json simulate_candidate(const Setup& base, const SearchArgs& a, const Candidate& c) {
  try {
    sim::ReplayOptions ro;
    ro.fold = true;
    return summary_json(simulate(setup_of(base, a, c), ro, false));
  } catch (const std::exception& e) {
    return {{"error", e.what()}};
  }
}

// Layout results (simulate --json objects) sorted by step time, ties by their layout's text.
void sort_results(std::vector<nlohmann::json>& rows) {
  std::sort(rows.begin(), rows.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    const double a = x["step_time_s"].get<double>(), b = y["step_time_s"].get<double>();
    if (a != b) return a < b;
    return x["layout"].dump() + x["schedule"].dump() < y["layout"].dump() + y["schedule"].dump();
  });
}

void print_table(const std::vector<nlohmann::json>& rows, std::size_t top) {
  std::cout << std::left << std::setw(5) << "rank" << std::right;
  for (const char* h : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "mb"}) std::cout << std::setw(5) << h;
  std::cout << "  " << std::left << std::setw(18) << "recompute" << std::setw(8) << "overlap" << std::right
            << std::setw(13) << "step" << std::setw(12) << "tokens/s" << std::setw(8) << "MFU" << std::setw(11)
            << "memory" << std::setw(9) << "hidden" << "\n";
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
              << std::setw(9) << pct(r["a2a_hidden_fraction"].get<double>()) << "\n";
  }
}

std::vector<Candidate> enumerate(const SearchArgs& a, const Setup& base) {
  const auto parsed = ht::patterns::parse(base.pattern);
  const bool moe = base.pattern.find('E') != std::string::npos;
  std::vector<int> eps = a.ep;
  if (eps.empty()) {
    eps.push_back(1);
    if (moe)
      for (int e = 2; e <= base.dims.num_experts && e <= a.gpus; e *= 2)
        if (base.dims.num_experts % e == 0) eps.push_back(e);
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
std::string job_command(const SearchArgs& a, const Setup& base, const Candidate& c, const std::string& out) {
  std::ostringstream o;
  o << "mkdir -p '" << a.jobs_dir << "' && " << a.bin << " simulate";
  if (!a.model.model_file.empty()) o << " --model '" << a.model.model_file << "'";
  if (a.model.preset != "default") o << " --preset " << a.model.preset;
  for (const auto& [name, option] : a.model.options)
    if (option->count() > 0) o << " --" << name << " " << a.model.values.at(name);
  if (!a.pattern.empty()) o << " --pattern '" << base.pattern << "'";
  o << " --platform '" << a.platform << "' --gpus " << a.gpus << " --gbs " << a.gbs << " --tp " << c.tp << " --cp "
    << c.cp << " --pp " << c.pp << " --vpp " << c.vpp << " --ep " << c.ep << " --etp " << c.etp << " --mbs " << c.mbs
    << " --recompute " << (c.recompute == "none" ? "none" : c.recompute) << (c.overlap ? " --overlap" : " --no-overlap")
    << " --moe-dispatcher " << a.physics.dispatcher << " --routing " << a.physics.routing << " --precision "
    << a.physics.precision << (a.physics.tp_comm_overlap ? " --tp-comm-overlap" : "") << " --json > '" << out << "'";
  return o.str();
}

int run_search(const SearchArgs& a) {
  if (a.gpus <= 0) throw UsageError("search needs --gpus N");
  if (a.gbs <= 0) throw UsageError("search needs --gbs G (global batch in sequences)");
  if (a.top < 1) throw UsageError("--top must be at least 1");
  if (a.jobs < 1 || a.jobs > 256) throw UsageError("-j must be between 1 and 256");
  Setup base;
  const hs::ModelCard card = a.model.resolve_card();
  base.model = card.name;
  base.pattern = !a.pattern.empty() ? a.pattern : card.pattern;
  if (base.pattern.empty()) throw UsageError("give a model card (--model NAME) or a pattern (--pattern)");
  base.dims = card.dims;
  base.platform = sim::parse_platform(a.platform);
  if (!a.emit_jobs.empty()) io::check_output_file(a.emit_jobs, "jobs file");

  const std::vector<Candidate> all = enumerate(a, base);
  if (all.size() > 200000) throw UsageError("the search space holds " + std::to_string(all.size()) +
                                            " layouts, more than the limit of 200000; narrow the --*-list options");
  std::vector<int> indices(all.size());
  for (std::size_t i = 0; i < all.size(); ++i) indices[i] = static_cast<int>(i);
  std::cerr << "search: " << all.size() << " layouts of " << (base.model.empty() ? base.pattern : base.model)
            << " on " << a.gpus << " GPUs (" << base.platform.name << "), global batch " << a.gbs << "\n";
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
  std::cerr << "search: " << n_refused << " refused by the layout rules, " << too_big
            << " do not fit in " << std::fixed << std::setprecision(1) << base.platform.gpu.hbm_bytes / kGiB
            << " GiB of HBM";
  if (too_big > 0) std::cerr << " (the smallest of them needs " << smallest_too_big << " GiB)";
  std::cerr << ", " << ok.size() << " remain\n";
  std::vector<std::pair<std::string, int>> reasons(refused.begin(), refused.end());
  std::sort(reasons.begin(), reasons.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
  for (std::size_t i = 0; i < reasons.size() && i < 5; ++i)
    std::cerr << "  " << std::setw(6) << reasons[i].second << "  " << reasons[i].first << "\n";

  if (!a.emit_jobs.empty()) {
    io::write_output_file(a.emit_jobs, "jobs file", [&](std::ostream& o) {
      for (std::size_t k = 0; k < ok.size(); ++k) {
        char name[32];
        std::snprintf(name, sizeof name, "/job-%05zu.json", k);
        o << job_command(a, base, all[static_cast<std::size_t>(ok[k])], a.jobs_dir + name) << "\n";
      }
    });
    std::cerr << "wrote " << a.emit_jobs << " (" << ok.size() << " commands; run them anywhere, then `" << a.bin
              << " merge " << a.jobs_dir << "/*.json`)\n";
    return 0;
  }

  // Phase 2: simulate in the order of the bound, a batch of -j at a time, until the bound of the
  // next layout exceeds the K-th best step found (it cannot enter the table).
  std::sort(ok.begin(), ok.end(), [&](int x, int y) {
    const double bx = assessed[static_cast<std::size_t>(x)]["bound_s"], by = assessed[static_cast<std::size_t>(y)]["bound_s"];
    return bx != by ? bx < by : x < y;
  });
  std::vector<nlohmann::json> results;
  std::size_t next = 0;
  int failed = 0;
  double next_report = 1;
  const auto t0 = std::chrono::steady_clock::now();
  while (next < ok.size()) {
    if (!a.no_prune && results.size() >= static_cast<std::size_t>(a.top)) {
      sort_results(results);
      const double kth = results[static_cast<std::size_t>(a.top) - 1]["step_time_s"];
      if (assessed[static_cast<std::size_t>(ok[next])]["bound_s"].get<double>() > kth) break;
    }
    const std::size_t end = std::min(ok.size(), next + static_cast<std::size_t>(a.jobs));
    const std::vector<int> batch(ok.begin() + static_cast<std::ptrdiff_t>(next), ok.begin() + static_cast<std::ptrdiff_t>(end));
    const auto got = parallel_map(batch, a.jobs, "",
                                  [&](int i) { return simulate_candidate(base, a, all[static_cast<std::size_t>(i)]); });
    for (std::size_t k = 0; k < got.size(); ++k) {
      if (got[k].contains("error")) {
        ++failed;
        continue;
      }
      results.push_back(got[k]);
      results.back()["bound_s"] = assessed[static_cast<std::size_t>(batch[k])]["bound_s"];
    }
    next = end;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (elapsed >= next_report) {
      std::fprintf(stderr, "\rsearch: simulated %zu of at most %zu, %.0f s   ", next, ok.size(), elapsed);
      next_report = elapsed + 1;
    }
  }
  if (next_report > 1) std::fprintf(stderr, "\n");
  sort_results(results);
  std::cerr << "search: simulated " << next << ", " << ok.size() - next << " pruned by the lower bound"
            << (failed > 0 ? ", " + std::to_string(failed) + " failed to simulate" : std::string()) << "\n";
  if (results.size() > static_cast<std::size_t>(a.top)) results.resize(static_cast<std::size_t>(a.top));
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
    print_table(results, static_cast<std::size_t>(a.top));
  }
  return 0;
}

struct MergeArgs {
  std::vector<std::string> files;
  int top = 10;
  bool json_out = false;
};

int run_merge(const MergeArgs& a) {
  if (a.top < 1) throw UsageError("--top must be at least 1");
  std::vector<nlohmann::json> results;
  int not_fitting = 0, failed = 0;
  for (const auto& f : a.files) {
    const nlohmann::json j = io::read_json_file(f, 64ull << 20, "simulation result");
    std::vector<nlohmann::json> items;
    if (j.is_object() && j.contains("results") && j["results"].is_array()) items = j["results"].get<std::vector<nlohmann::json>>();
    else items.push_back(j);
    for (const auto& r : items) {
      const bool valid = r.is_object() && r.contains("step_time_s") && r["step_time_s"].is_number() &&
                         r.contains("layout") && r["layout"].is_object() && r.contains("schedule") &&
                         r.contains("tokens_per_s") && r.contains("mfu") && r.contains("memory_gib") &&
                         r.contains("a2a_hidden_fraction");
      if (!valid) {
        if (r.is_object() && r.contains("error")) {
          ++failed;
          continue;
        }
        throw UsageError("'" + f + "' is not the JSON of `simulate --json` or `search --json` (no step_time_s/layout)");
      }
      for (const char* k : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches"})
        if (!r["layout"].contains(k) || !r["layout"][k].is_number())
          throw UsageError("'" + f + "': layout." + k + " is missing or not a number");
      if (r.contains("memory_fits") && r["memory_fits"] == false) {
        ++not_fitting;
        continue;
      }
      results.push_back(r);
    }
  }
  sort_results(results);
  std::cerr << "merge: " << results.size() << " results from " << a.files.size() << " files"
            << (not_fitting > 0 ? ", " + std::to_string(not_fitting) + " that do not fit left out" : std::string())
            << (failed > 0 ? ", " + std::to_string(failed) + " failed runs" : std::string()) << "\n";
  if (results.size() > static_cast<std::size_t>(a.top)) results.resize(static_cast<std::size_t>(a.top));
  if (a.json_out) std::cout << nlohmann::json{{"results", results}}.dump(2) << "\n";
  else print_table(results, static_cast<std::size_t>(a.top));
  return 0;
}

const Registration search_reg{{
    "search",
    "Rank the layouts of a model on a cluster: enumerate, drop what breaks a rule or memory, simulate the best",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<SearchArgs>();
      add_model_flags(sub, a->model);
      sub.add_option("--pattern", a->pattern, "hybrid layer pattern (default: the model card's)");
      sub.add_option("--platform", a->platform, "PRESET[:key=value,...], as for simulate")->capture_default_str();
      sub.add_option("--gpus", a->gpus, "world size")->required();
      sub.add_option("--gbs", a->gbs, "global batch in sequences")->required();
      sub.add_option("--top", a->top, "how many layouts to list")->capture_default_str();
      sub.add_option("-j,--jobs", a->jobs, "worker processes")->capture_default_str();
      sub.add_flag("--json", a->json_out,
                   "print the ranked results (simulate --json objects with the lower bound bound_s) and the counts as JSON");
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
      sub.add_option("--mbs-list", a->mbs, "micro batch sizes")->delimiter(',')->capture_default_str()->group(space);
      sub.add_option("--recompute-list", a->recompute, "recomputation settings ('none', 'full', module lists; ';'-separated)")
          ->delimiter(';')
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
          ->group(jobs);
      sub.add_option("--jobs-dir", a->jobs_dir, "where the emitted commands write their JSON")->capture_default_str()->group(jobs);
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
      return [a] { return run_merge(*a); };
    },
    33}};

}  // namespace
}  // namespace ht::cli
