// The subcommand registry (command.hpp), in the library every command file links, so commands
// compiled into the executable and commands in plugins (plugins.hpp) register in one list.
#include "command.hpp"

namespace ht::cli {
std::vector<CommandSpec>& registry() {
  static std::vector<CommandSpec> commands;
  return commands;
}
}  // namespace ht::cli
