// Subcommand registry of the hybrid-twin executable. Each cmd_*.cpp registers itself with a
// static Registration; main() wires them into CLI11 and turns exceptions into one-line errors.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace ht::cli {

// Called once while the parser is built; returns the action to run when the subcommand was
// chosen. The action returns the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App& sub)>;

struct CommandSpec {
  std::string name;
  std::string description;
  CommandSetup setup;
  int order = 100;  // position in --help
};

std::vector<CommandSpec>& registry();

struct Registration {
  explicit Registration(CommandSpec spec) { registry().push_back(std::move(spec)); }
};

// Number checks whose refusal names the bound, not CLI11's range up to a 309-digit DBL_MAX, and
// quotes at most 40 characters of what was given.
inline CLI::Validator number_above(double low, bool strict) {
  const std::string bound = std::string(strict ? "> " : ">= ") + (low == 0 ? "0" : std::to_string(low));
  return CLI::Validator(
      [low, strict, bound](std::string& in) -> std::string {
        const std::string shown = in.size() > 40 ? in.substr(0, 40) + "..." : in;
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + shown + "' is not a number";
        if (std::isinf(v)) return "Value " + shown + " must be a finite number " + bound;
        if (!(strict ? v > low : v >= low)) return "Value " + shown + " must be " + bound;
        return "";
      },
      "NUMBER " + bound);
}
// An output path: given, it must name something (an empty one is not "no output").
inline const CLI::Validator kOutputPath = CLI::Validator(
    [](std::string& in) -> std::string { return in.empty() ? "an empty path: give a file name" : ""; }, "PATH");
// A number in [low, high]: for values whose products would overflow to infinity (a margin of
// 1e300 GiB, a price of 1e300 an hour) the bound is far beyond any real one.
inline CLI::Validator number_between(double low, double high) {
  char text[64];
  std::snprintf(text, sizeof text, "in [%g, %g]", low, high);
  const std::string range = text;
  return CLI::Validator(
      [low, high, range](std::string& in) -> std::string {
        const std::string shown = in.size() > 40 ? in.substr(0, 40) + "..." : in;
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + shown + "' is not a number";
        if (!(v >= low && v <= high)) return "Value " + shown + " must be " + range;
        return "";
      },
      "NUMBER " + range);
}
inline const CLI::Validator kNonNegative = number_above(0, false);
inline const CLI::Validator kPositive = number_above(0, true);

// Thrown by commands for bad user input that is not a module error; exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ht::cli
