// `hybrid-twin fidelity`: the twin held against real runs. Reads a file of published
// measurements (default: the public set compiled in from bench/fidelity/public-runs.json, every
// row citing its source), runs `simulate` on each row's own arguments (exactly what a user would
// type), and prints measured against predicted, the error, the median and worst, whether the
// layouts of one group come out in the measured order (top-1 agreement and Kendall's tau), and the
// gains the file asks for (e.g. what the EP overlap saves). Nothing here feeds the cost model: a
// row is a judge, never an input (docs/twin.md, "Fidelity").
//
// File format (JSON; docs/twin.md lists it):
//   { "format": "hybrid-twin-fidelity", "version": 1,
//     "runs": [ { "id": "...", "group": "...", "source": "...", "args": ["--model", ...],
//                 "measured": { "step_time_s": 19.7 }, "rank": true, "note": "...",
//                 "unsupported": "why the twin cannot describe it (then no args)" } ],
//     "gains": [ { "name": "...", "base": "<id>", "with": "<id>" } ] }
// `measured` keys are keys of `simulate --json` (step_time_s, model_tflops_per_gpu,
// compute_busy_s, a2a_total_s, ...); the first one is the row's headline.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fcntl.h>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/json_input.hpp"
#include "process_pool.hpp"
#include "whatif.hpp"

namespace ht::cli {
extern const char* const kPublicRuns;  // bench/fidelity/public-runs.json, compiled in
namespace {

struct FidelityArgs {
  std::string runs_file;
  std::string filter;
  std::vector<std::string> extra;
  int jobs = 1;
  bool json_out = false;
};

struct Row {
  std::string id, group, source, note, unsupported;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, double>> measured;  // in file order; the first is the headline
  bool rank = true;
};

// Metrics where larger is better (the rest are times).
bool higher_is_better(const std::string& key) { return key == "model_tflops_per_gpu" || key == "tokens_per_s" || key == "mfu"; }

const std::set<std::string>& known_metrics() {
  static const std::set<std::string> keys{"step_time_s",  "model_tflops_per_gpu", "tokens_per_s",  "mfu",
                                          "compute_busy_s", "a2a_total_s",         "a2a_exposed_s", "memory_gib",
                                          "layer_compute_s"};
  return keys;
}

// A row is one `simulate --json`: options that write files, print something else or run several
// simulations are refused, in a row's arguments and in --extra.
template <class Bad>
void check_row_args(const std::vector<std::string>& args, const std::string& where, const Bad& bad) {
  static const char* const kRefused[] = {"--trace", "--svg", "--json", "--sweep", "--compare-grouping",
                                         "--help", "-h", "-j", "--jobs"};
  for (const std::string& a : args)
    for (const char* r : kRefused) {
      const std::string flag = r;
      if (a == flag || a.rfind(flag + "=", 0) == 0)
        throw bad(where + ": '" + flag + "' is not allowed (a row is one simulate --json that writes no file)");
    }
}

std::vector<Row> read_rows(const nlohmann::json& doc, const std::string& source,
                           std::vector<std::array<std::string, 3>>& gains) {
  auto bad = [&](const std::string& why) { return UsageError(source + ": " + why); };
  if (!doc.is_object() || doc.value("format", "") != "hybrid-twin-fidelity")
    throw bad("not a fidelity file (\"format\": \"hybrid-twin-fidelity\" expected)");
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<long long>() != 1)
    throw bad("unsupported version (1 expected)");
  for (const auto& [key, value] : doc.items())
    if (key != "format" && key != "version" && key != "about" && key != "description" && key != "runs" && key != "gains")
      throw bad("unknown top-level field '" + key + "' (format, version, about, description, runs, gains)");
  if (!doc.contains("runs") || !doc["runs"].is_array() || doc["runs"].empty()) throw bad("\"runs\" must be a non-empty array");
  std::vector<Row> rows;
  std::set<std::string> ids;
  for (const auto& r : doc["runs"]) {
    Row row;
    if (!r.is_object() || !r.contains("id") || !r["id"].is_string()) throw bad("every run needs a string \"id\"");
    row.id = r["id"].get<std::string>();
    for (const auto& [key, value] : r.items())
      if (key != "id" && key != "group" && key != "source" && key != "note" && key != "unsupported" && key != "rank" &&
          key != "measured" && key != "args")
        throw bad("run '" + row.id + "': unknown field '" + key + "' (id, group, source, note, rank, measured, args, unsupported)");
    if (!ids.insert(row.id).second) throw bad("run id '" + row.id + "' appears twice");
    auto text = [&](const char* key) {
      if (!r.contains(key)) return std::string();
      if (!r[key].is_string()) throw bad("run '" + row.id + "': \"" + key + "\" must be a string");
      return r[key].get<std::string>();
    };
    row.group = text("group");
    row.source = text("source");
    row.note = text("note");
    row.unsupported = text("unsupported");
    if (row.source.empty()) throw bad("run '" + row.id + "' has no \"source\" (every measurement cites one)");
    if (r.contains("rank")) {
      if (!r["rank"].is_boolean()) throw bad("run '" + row.id + "': \"rank\" must be true or false");
      row.rank = r["rank"].get<bool>();
    }
    if (!r.contains("measured") || !r["measured"].is_object() || r["measured"].empty())
      throw bad("run '" + row.id + "' needs a \"measured\" object");
    for (const auto& [key, value] : r["measured"].items()) {
      if (!known_metrics().count(key)) throw bad("run '" + row.id + "': unknown measured key '" + key + "'");
      if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>()))
        throw bad("run '" + row.id + "': measured '" + key + "' must be a positive number");
      row.measured.emplace_back(key, value.get<double>());
    }
    if (!row.unsupported.empty() && r.contains("args"))
      throw bad("run '" + row.id + "' has both \"args\" and \"unsupported\"; give one");
    if (row.unsupported.empty()) {
      if (!r.contains("args") || !r["args"].is_array() || r["args"].empty())
        throw bad("run '" + row.id + "' needs \"args\" (simulate's arguments) or \"unsupported\"");
      for (const auto& a : r["args"]) {
        if (!a.is_string()) throw bad("run '" + row.id + "': every argument must be a string");
        row.args.push_back(a.get<std::string>());
      }
      check_row_args(row.args, "run '" + row.id + "'", bad);
    }
    rows.push_back(std::move(row));
  }
  if (doc.contains("gains")) {
    if (!doc["gains"].is_array()) throw bad("\"gains\" must be an array");
    for (const auto& g : doc["gains"]) {
      if (!g.is_object() || !g.contains("name") || !g.contains("base") || !g.contains("with") || !g["name"].is_string() ||
          !g["base"].is_string() || !g["with"].is_string())
        throw bad("every gain needs string \"name\", \"base\" and \"with\"");
      for (const char* k : {"base", "with"})
        if (!ids.count(g[k].get<std::string>())) throw bad("gain '" + g["name"].get<std::string>() + "' names no run '" + g[k].get<std::string>() + "'");
      gains.push_back({g["name"].get<std::string>(), g["base"].get<std::string>(), g["with"].get<std::string>()});
    }
  }
  return rows;
}

// `simulate ARGS --json` in this (worker) process; {"error": ...} when it refuses.
nlohmann::json simulate_row(const std::vector<std::string>& row_args, const std::vector<std::string>& extra) {
  const auto& reg = registry();
  const auto spec = std::find_if(reg.begin(), reg.end(), [](const CommandSpec& c) { return c.name == "simulate"; });
  if (spec == reg.end()) return {{"error", "this build has no simulate command"}};
  CLI::App app;
  CLI::App* sub = app.add_subcommand("simulate");
  const auto action = spec->setup(*sub);
  std::vector<std::string> args{"simulate"};
  args.insert(args.end(), row_args.begin(), row_args.end());
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("--json");
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector's arguments from its back
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  try {
    app.parse(args);
    const int rc = action();
    std::cout.rdbuf(old);
    if (rc != 0) return {{"error", "simulate exited " + std::to_string(rc)}};
    return nlohmann::json::parse(out.str());
  } catch (const std::exception& e) {
    std::cout.rdbuf(old);
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    return {{"error", what}};
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string signed_pct(double f) {
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << f * 100 << " %";
  return o.str();
}

// Seconds-like "cost" of a row for ranking (lower is better): a time, or 1/throughput.
double cost_of(const std::string& key, double value) { return higher_is_better(key) ? 1 / value : value; }

int run(const FidelityArgs& a) {
  const std::string source = a.runs_file.empty() ? std::string("the public set (bench/fidelity/public-runs.json)")
                                                 : "fidelity file '" + a.runs_file + "'";
  const nlohmann::json doc = a.runs_file.empty() ? io::parse_json(kPublicRuns, source)
                                                 : io::read_json_file(a.runs_file, 16ull << 20, "fidelity file");
  check_row_args(a.extra, "--extra", [](const std::string& why) { return UsageError(why); });
  std::vector<std::array<std::string, 3>> gains;
  std::vector<Row> rows = read_rows(doc, source, gains);
  if (!a.filter.empty()) {
    std::erase_if(rows, [&](const Row& r) { return r.id.find(a.filter) == std::string::npos && r.group.find(a.filter) == std::string::npos; });
    if (rows.empty()) throw UsageError("no run's id or group contains '" + a.filter + "'");
  }
  std::vector<int> todo;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].unsupported.empty()) todo.push_back(static_cast<int>(i));
  const auto results = parallel_map(todo, a.jobs, "fidelity", [&](int i) {
    // A row's own progress lines would garble the table's; its errors come back in the JSON.
    const int null_fd = open("/dev/null", O_WRONLY);
    if (null_fd >= 0) dup2(null_fd, 2);
    return simulate_row(rows[static_cast<std::size_t>(i)].args, a.extra);
  });
  std::map<std::string, nlohmann::json> predicted;  // id -> simulate --json (or {"error"})
  for (std::size_t k = 0; k < todo.size(); ++k) predicted[rows[static_cast<std::size_t>(todo[k])].id] = results[k];

  nlohmann::json out_rows = nlohmann::json::array();
  std::vector<double> headline_errors;
  int within_20 = 0, failed = 0;
  for (const Row& r : rows) {
    nlohmann::json j{{"id", r.id}, {"group", r.group}, {"source", r.source}};
    if (!r.unsupported.empty()) {
      j["unsupported"] = r.unsupported;
    } else if (predicted[r.id].contains("error")) {
      j["error"] = predicted[r.id]["error"];
      ++failed;
    } else if (const auto missing = std::find_if(r.measured.begin(), r.measured.end(), [&](const std::pair<std::string, double>& m) {
                 const auto& p = predicted[r.id];
                 return !p.contains(m.first) || !p[m.first].is_number() || !std::isfinite(p[m.first].get<double>());
               });
               missing != r.measured.end()) {
      predicted[r.id] = {{"error", "the simulation gave no number for '" + missing->first + "'"}};
      j["error"] = predicted[r.id]["error"];
      ++failed;
    } else {
      nlohmann::json metrics = nlohmann::json::array();
      for (std::size_t m = 0; m < r.measured.size(); ++m) {
        const auto& [key, value] = r.measured[m];
        const double pred = predicted[r.id].value(key, std::nan(""));
        const double err = pred / value - 1;
        metrics.push_back({{"metric", key}, {"measured", value}, {"predicted", pred}, {"error", err}});
        if (m == 0) {
          headline_errors.push_back(std::abs(err));
          within_20 += std::abs(err) <= 0.20;
        }
      }
      j["metrics"] = metrics;
    }
    out_rows.push_back(j);
  }

  // Ranking per group: rows marked rank with a step time (or throughput) measured and predicted.
  nlohmann::json groups = nlohmann::json::array();
  std::map<std::string, std::vector<const Row*>> by_group;
  for (const Row& r : rows)
    if (r.rank && r.unsupported.empty() && !predicted[r.id].contains("error") && !r.group.empty()) by_group[r.group].push_back(&r);
  for (const auto& [name, members] : by_group) {
    if (members.size() < 2) continue;
    const std::string key = members.front()->measured.front().first;
    std::vector<double> meas, pred;
    std::vector<std::string> ids;
    for (const Row* r : members) {
      if (r->measured.front().first != key) continue;
      meas.push_back(cost_of(key, r->measured.front().second));
      pred.push_back(cost_of(key, predicted[r->id].value(key, std::nan(""))));
      ids.push_back(r->id);
    }
    // Kendall's tau over the pairs the measurement orders (measured ties are left out).
    int concordant = 0, discordant = 0;
    for (std::size_t i = 0; i < meas.size(); ++i)
      for (std::size_t k = i + 1; k < meas.size(); ++k) {
        if (meas[i] == meas[k]) continue;
        const double s = (meas[i] - meas[k]) * (pred[i] - pred[k]);
        (s > 0 ? concordant : discordant) += 1;
      }
    const double tau = concordant + discordant > 0 ? double(concordant - discordant) / (concordant + discordant) : 1;
    const auto best_pred = std::min_element(pred.begin(), pred.end()) - pred.begin();
    const double best_meas = *std::min_element(meas.begin(), meas.end());
    nlohmann::json order_pred = nlohmann::json::array(), order_meas = nlohmann::json::array();
    std::vector<std::size_t> idx(meas.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return pred[x] < pred[y]; });
    for (auto i : idx) order_pred.push_back(ids[i]);
    std::sort(idx.begin(), idx.end(), [&](std::size_t x, std::size_t y) { return meas[x] < meas[y]; });
    for (auto i : idx) order_meas.push_back(ids[i]);
    groups.push_back({{"group", name},
                      {"runs", ids.size()},
                      {"kendall_tau", tau},
                      {"top1_agrees", meas[static_cast<std::size_t>(best_pred)] == best_meas},
                      {"predicted_order", order_pred},
                      {"measured_order", order_meas}});
  }

  nlohmann::json gain_rows = nlohmann::json::array();
  for (const auto& [name, base, with] : gains) {
    auto find = [&](const std::string& id) {
      return std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.id == id; });
    };
    const auto b = find(base), w = find(with);
    if (b == rows.end() || w == rows.end()) continue;  // filtered out
    if (!predicted.count(base) || !predicted.count(with) || predicted[base].contains("error") || predicted[with].contains("error"))
      continue;
    const std::string key = b->measured.front().first;
    const double mg = 1 - cost_of(key, w->measured.front().second) / cost_of(key, b->measured.front().second);
    const double pg = 1 - cost_of(key, predicted[with].value(key, std::nan(""))) / cost_of(key, predicted[base].value(key, std::nan("")));
    gain_rows.push_back({{"name", name}, {"base", base}, {"with", with}, {"measured", mg}, {"predicted", pg}, {"difference_points", 100 * (pg - mg)}});
  }

  const double med = median(headline_errors);
  const double worst = headline_errors.empty() ? 0 : *std::max_element(headline_errors.begin(), headline_errors.end());
  if (a.json_out) {
    nlohmann::json j{{"runs", out_rows},
                     {"groups", groups},
                     {"gains", gain_rows},
                     {"summary",
                      {{"compared", headline_errors.size()},
                       {"median_abs_error", med},
                       {"worst_abs_error", worst},
                       {"within_20_percent", within_20},
                       {"failed", failed},
                       {"unsupported", rows.size() - todo.size()}}}};
    std::cout << j.dump(2) << "\n";
    return failed > 0 ? 1 : 0;
  }
  std::size_t w_id = 4;
  for (const Row& r : rows) w_id = std::max(w_id, r.id.size());
  std::cout << std::left << std::setw(static_cast<int>(w_id) + 2) << "run" << std::setw(22) << "metric" << std::right
            << std::setw(12) << "measured" << std::setw(12) << "twin" << std::setw(10) << "error" << "\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const auto& j = out_rows[i];
    std::cout << std::left << std::setw(static_cast<int>(w_id) + 2) << r.id;
    if (j.contains("unsupported")) {
      std::cout << "not described: " << r.unsupported << "\n";
      continue;
    }
    if (j.contains("error")) {
      std::cout << "error: " << j["error"].get<std::string>() << "\n";
      continue;
    }
    bool first = true;
    for (const auto& m : j["metrics"]) {
      if (!first) std::cout << std::left << std::setw(static_cast<int>(w_id) + 2) << "";
      first = false;
      const std::string key = m["metric"];
      const int digits = key == "model_tflops_per_gpu" ? 1 : 3;
      std::cout << std::left << std::setw(22) << key << std::right << std::setw(12) << fixed(m["measured"], digits)
                << std::setw(12) << fixed(m["predicted"], digits) << " " << std::setw(9) << signed_pct(m["error"])
                << "\n";
    }
  }
  std::cout << "\n" << headline_errors.size() << " runs compared: median |error| " << fixed(100 * med, 1)
            << " %, worst " << fixed(100 * worst, 1) << " %, " << within_20 << " within 20 %";
  if (rows.size() > todo.size()) std::cout << "; " << rows.size() - todo.size() << " not described";
  if (failed) std::cout << "; " << failed << " failed";
  std::cout << "\n";
  for (const auto& g : groups) {
    std::cout << "\n" << g["group"].get<std::string>() << ": Kendall tau " << fixed(g["kendall_tau"], 2) << ", top-1 "
              << (g["top1_agrees"].get<bool>() ? "agrees" : "DISAGREES") << "\n  measured order:";
    for (const auto& id : g["measured_order"]) std::cout << "  " << id.get<std::string>();
    std::cout << "\n  twin order:    ";
    for (const auto& id : g["predicted_order"]) std::cout << "  " << id.get<std::string>();
    std::cout << "\n";
  }
  for (const auto& g : gain_rows)
    std::cout << "\n" << g["name"].get<std::string>() << ": measured " << fixed(100 * g["measured"].get<double>(), 1)
              << " %, twin " << fixed(100 * g["predicted"].get<double>(), 1) << " % (" << std::showpos
              << fixed(g["difference_points"].get<double>(), 1) << std::noshowpos << " points)\n";
  return failed > 0 ? 1 : 0;
}

const Registration reg{{
    "fidelity",
    "Hold the twin against published real runs: measured vs predicted, errors, layout order",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<FidelityArgs>();
      sub.add_option("RUNS", a->runs_file,
                     "fidelity file (JSON, format in docs/twin.md; default: the public set compiled in)")
          ->check(CLI::ExistingFile);
      sub.add_option("--filter", a->filter, "only runs whose id or group contains this text");
      sub.add_option("--extra", a->extra, "an argument appended to every run's simulate arguments (repeatable)")
          ->allow_extra_args(false);
      sub.add_option("-j,--jobs", a->jobs, "worker processes")->check(CLI::Range(1, 256))->capture_default_str();
      sub.add_flag("--json", a->json_out, "print results as JSON");
      return [a] { return run(*a); };
    },
    36}};

}  // namespace
}  // namespace ht::cli
