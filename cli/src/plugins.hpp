// Command plugins: the commands that need SimGrid (simulate, search, fidelity) or the engine
// (train, verify, fuzz, calibrate) live in shared libraries beside the executable's folder, opened
// only when the command line names a command the executable does not hold itself, so `hybrid-twin
// pattern` or `plan` start without mapping SimGrid, the engine or its backends. Each plugin's
// commands register themselves (command.hpp) when it is opened. A static build compiles every
// command into the executable and has no plugins.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ht::cli {

// Opens every plugin this build made (once per process); returns one line per plugin that could
// not be opened (the file and the loader's reason), empty when all were.
std::vector<std::string> load_command_plugins();

// The folder of the running executable (empty if /proc does not say).
std::filesystem::path executable_folder();

}  // namespace ht::cli
