// `hybrid-twin fuzz`: runs the verifier's named properties (ht::verify) for a budget of cases or
// seconds with a seed, prints one row per property (property, cases, seconds, result), writes a
// shrunk counterexample file for every failure, and `--replay FILE` runs such a file again.
// Exit codes: 0 all passed (or the replayed case passes now), 1 a property failed (or the
// replayed case still fails), 2 bad input.

#include <cctype>
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/verify/case_schema.hpp"
#include "ht/verify/property.hpp"
#include "ht/verify/runner.hpp"

namespace ht::cli {
namespace {

struct FuzzArgs {
  std::vector<std::string> properties;
  int cases = 0;
  double seconds = 0;
  std::optional<std::uint64_t> seed;
  std::string pattern;
  bool json_out = false;
  bool list = false;
  std::string out_dir = ".";
  std::string replay_file;
};

// Progress on stderr: a line per property, its case count redrawn in place on a terminal at most
// every 0.2 s (io::log::Progress).
class Progress {
 public:
  void start(const std::string& name) {
    name_ = name;
    last_ = std::chrono::steady_clock::now();
    if (!line_.terminal()) io::log::say("fuzz") << name << " ...";
  }
  void cases(int n) {
    if (!line_.terminal()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    line_.draw("fuzz: " + name_ + " " + std::to_string(n) + " cases", 0);
  }
  void done(const verify::RunResult& r) {
    io::log::Line line("fuzz");
    line << r.property << " " << verify::to_string(r.outcome) << " (" << r.cases << " cases, " << std::fixed
         << std::setprecision(2) << r.seconds << " s)";
    if (!r.note.empty()) line << ": " << first_line(r.note);
  }

 private:
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
  io::log::Progress line_{"progress"};
  std::string name_;
  std::chrono::steady_clock::time_point last_;
};

int replay_file(const FuzzArgs& a) {
  const verify::Counterexample ce = verify::read_counterexample(a.replay_file);
  if (!verify::find_property(ce.property))
    throw UsageError("counterexample names property '" + ce.property + "', which this build does not have");
  io::log::say("fuzz") << "replaying " << ce.property << " on " << ce.input.dump();
  std::optional<std::string> failure;
  try {
    failure = verify::replay(ce);
  } catch (const verify::BadCase& e) {  // the file is wrong, not the property: exit 2
    throw UsageError(a.replay_file + ": " + e.what());
  }
  if (a.json_out) {
    std::cout << nlohmann::json{{"property", ce.property}, {"result", failure ? "fail" : "pass"},
                                {"message", failure.value_or("")}}
                     .dump(2)
              << "\n";
  } else if (failure) {
    std::cout << ce.property << ": still fails: " << *failure << "\n";
  } else {
    std::cout << ce.property << ": passes now\n";
  }
  return failure ? 1 : 0;
}

std::string file_name_for(const std::string& property) {
  std::string out = "counterexample-";
  for (char c : property) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '-';
  return out + ".json";
}

int run(const FuzzArgs& a) {
  if (!a.replay_file.empty()) return replay_file(a);
  if (a.list) {
    for (const auto& p : verify::properties())
      std::cout << std::left << std::setw(34) << p.name << p.summary << "\n";
    return 0;
  }
  std::vector<const verify::Property*> chosen;
  if (a.properties.empty()) {
    for (const auto& p : verify::properties()) chosen.push_back(&p);
  } else {
    for (const auto& name : a.properties) {
      // A group name ("pattern", "engine", "pattern.rule") selects every property under it.
      std::vector<const verify::Property*> matched;
      for (const auto& p : verify::properties())
        if (p.name == name || p.name.rfind(name + ".", 0) == 0) matched.push_back(&p);
      if (matched.empty())
        throw UsageError("unknown property '" + name + "' (run 'hybrid-twin fuzz --list' for the names)");
      chosen.insert(chosen.end(), matched.begin(), matched.end());
    }
  }
  verify::RunOptions options;
  if (a.seed) {
    options.seed = *a.seed;
  } else {
    options.seed = std::random_device{}();
  }
  options.cases = a.cases > 0 ? a.cases : 100;
  options.seconds = a.seconds;
  if (!a.pattern.empty()) {
    (void)patterns::parse(a.pattern);  // a bad pattern is a usage error (exit 2, caret line)
    options.context.pattern = a.pattern;
  }
  io::log::say("fuzz") << "seed " << options.seed << ", "
                       << (a.seconds > 0 ? std::to_string(a.seconds) + " s" : std::to_string(options.cases) + " cases")
                       << " per property" << (a.pattern.empty() ? "" : ", pattern '" + a.pattern + "'");
  if (!a.out_dir.empty()) {  // before the first case: a failure must have somewhere to go
    std::error_code ec;
    std::filesystem::create_directories(a.out_dir, ec);
    io::check_output_file(std::filesystem::path(a.out_dir) / "counterexample-probe.json", "counterexample");
  }
  Progress progress;
  std::vector<verify::RunResult> rows;
  for (const auto* p : chosen) {
    progress.start(p->name);
    options.on_case = [&progress](int n) { progress.cases(n); };
    verify::RunResult r = verify::run_property(*p, options);
    progress.done(r);
    if (r.counterexample) {
      const auto path = std::filesystem::path(a.out_dir) / file_name_for(p->name);
      verify::write_counterexample(path, *r.counterexample);
      io::log::say("fuzz") << "counterexample written to " << path.string() << " (replay: hybrid-twin fuzz --replay "
                           << path.string() << ")";
    }
    rows.push_back(std::move(r));
  }
  bool failed = false;
  for (const auto& r : rows) failed |= r.outcome == verify::Outcome::Fail;
  if (a.json_out) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : rows)
      j.push_back({{"property", r.property}, {"cases", r.cases}, {"seconds", r.seconds},
                   {"result", verify::to_string(r.outcome)}});
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << std::left << std::setw(34) << "property" << std::right << std::setw(8) << "cases" << std::setw(10)
              << "seconds" << "  result\n";
    for (const auto& r : rows)
      std::cout << std::left << std::setw(34) << r.property << std::right << std::setw(8) << r.cases << std::setw(10)
                << std::fixed << std::setprecision(2) << r.seconds << std::defaultfloat << "  "
                << verify::to_string(r.outcome) << (r.outcome == verify::Outcome::Skip ? " (" + r.note + ")" : "")
                << "\n";
  }
  return failed ? 1 : 0;
}

const Registration reg{{
    "fuzz",
    "Fuzz the verifier's named properties (patterns, plans, twin, engine) and replay counterexamples",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<FuzzArgs>();
      sub.add_option("--property", a->properties,
                     "property name or group prefix (repeatable; default: all; see --list)");
      auto* cases = sub.add_option("--cases", a->cases, "cases per property (default 100)")->check(kPositive);
      sub.add_option("--seconds", a->seconds, "time budget per property instead of a case count")
          ->check(kPositive)
          ->excludes(cases);
      sub.add_option("--seed", a->seed, "seed (default: random, printed on stderr)");
      sub.add_option("--pattern", a->pattern, "fix the pattern and fuzz everything else");
      sub.add_option("--out", a->out_dir, "folder for counterexample files (default: .)")->check(kOutputPath);
      sub.add_option("--replay", a->replay_file, "run a counterexample file again (exit 1 if it still fails)")
          ->check(CLI::ExistingFile);
      sub.add_flag("--json", a->json_out, "print a JSON list of rows (property, cases, seconds, result)");
      sub.add_flag("--list", a->list, "list the properties of this build");
      return [a] { return run(*a); };
    },
    45}};

}  // namespace
}  // namespace ht::cli
