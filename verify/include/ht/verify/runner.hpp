// Running a property for a budget of cases (or seconds) with a seed, outside any test framework,
// and turning a failure into a minimal, replayable counterexample file. Used by
// `hybrid-twin fuzz`, the tests of tests/verify and bench/verify.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "ht/verify/property.hpp"

namespace ht::verify {

struct RunOptions {
  std::uint64_t seed = 1;
  int cases = 100;        // successful cases to run (ignored when seconds > 0)
  double seconds = 0;     // > 0: keep running batches of cases until this much time has passed
  bool shrink = true;
  FuzzContext context;
  // Called after every case with the number of cases run so far (progress display).
  std::function<void(int cases)> on_case;
};

enum class Outcome { Pass, Fail, Skip };
std::string_view to_string(Outcome o);

// A failing case, shrunk: what `--replay` needs to run it again.
struct Counterexample {
  std::string property;
  std::uint64_t seed = 0;
  Case input;             // the minimal case (pattern and configuration)
  std::string message;    // what the check said
};

struct RunResult {
  std::string property;
  Outcome outcome = Outcome::Pass;
  int cases = 0;          // cases that ran to completion (passing ones, plus the failing one)
  double seconds = 0;
  std::string note;       // skip reason or failure message
  std::optional<Counterexample> counterexample;
};

RunResult run_property(const Property& property, const RunOptions& options);

// Runs the check on exactly the stored case. Returns the failure message, or nullopt when the
// case passes now. Throws std::invalid_argument for an unknown property and BadCase
// (case_schema.hpp) for a case outside the generators' domain or lacking a field the check reads.
std::optional<std::string> replay(const Counterexample& ce);

// {"property", "seed", "input", "message", "format": "hybrid-twin-counterexample/1"}.
nlohmann::json to_json(const Counterexample& ce);
// Validates the fields; throws std::invalid_argument naming the first bad one.
Counterexample counterexample_from_json(const nlohmann::json& j);
// Atomic write (ht::io); read validates (a bounded regular file, JSON nested at most 64 levels,
// the fields, then the case's schema). Both throw std::runtime_error (ht::io::IoError for I/O).
void write_counterexample(const std::filesystem::path& path, const Counterexample& ce);
Counterexample read_counterexample(const std::filesystem::path& path);
// The reader on text already in memory; `source` names it in messages (the fuzz target's entry).
Counterexample parse_counterexample(std::string_view text, const std::string& source);

}  // namespace ht::verify
