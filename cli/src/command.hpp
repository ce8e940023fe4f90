// Subcommand registry of the hybrid-twin executable. Each cmd_*.cpp registers itself with a
// static Registration; main() wires them into CLI11 and turns exceptions into one-line errors.
#pragma once

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

// Thrown by commands for bad user input that is not a module error; exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ht::cli
