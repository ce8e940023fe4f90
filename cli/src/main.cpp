// hybrid-twin: one executable with subcommands (pattern, simulate, train, verify, fuzz, trace).
// Errors on user input become one line "error: ..." on stderr and exit code 2; a pattern error
// also shows the pattern with a caret under the offending character.
#include <algorithm>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>

#include "command.hpp"
#include "ht/patterns/error.hpp"

namespace ht::cli {
std::vector<CommandSpec>& registry() {
  static std::vector<CommandSpec> commands;
  return commands;
}
}  // namespace ht::cli

int main(int argc, char** argv) {
  CLI::App app{"hybrid-twin: design, simulate, train and verify grouped hybrid models with "
               "expert-parallel overlap"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hybrid-twin 0.1.0");
  auto& commands = ht::cli::registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  std::map<CLI::App*, std::function<int()>> actions;
  try {
    for (auto& spec : commands) {
      CLI::App* sub = app.add_subcommand(spec.name, spec.description);
      actions[sub] = spec.setup(*sub);
    }
  } catch (const std::exception& e) {
    std::cerr << "internal error while building the command line: " << e.what() << "\n";
    return 3;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << "error: " << e.what() << "\n";
    std::cerr << "run 'hybrid-twin --help' or 'hybrid-twin <command> --help' for usage\n";
    return 2;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
    return 2;
  } catch (const ht::patterns::PatternError& e) {
    std::cerr << "error: " << e.what() << "\n" << e.caret_line();
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
