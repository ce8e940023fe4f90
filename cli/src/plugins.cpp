// Opens the command plugins (plugins.hpp). HT_CLI_PLUGINS lists their file names, ':'-separated;
// they are looked for in ../lib of the executable's folder (the build tree and an install) and
// beside the executable.
#include "plugins.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <sstream>
#include <system_error>

namespace ht::cli {

std::filesystem::path executable_folder() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : self.parent_path();
}

std::vector<std::string> load_command_plugins() {
  static bool loaded = false;
  static std::vector<std::string> errors;
  if (loaded) return errors;
  loaded = true;
#ifdef HT_CLI_PLUGINS
  const auto here = executable_folder();
  std::istringstream names(HT_CLI_PLUGINS);
  for (std::string name; std::getline(names, name, ':');) {
    if (name.empty()) continue;
    std::filesystem::path found;
    for (const auto& candidate : {here.parent_path() / "lib" / name, here / name}) {
      std::error_code ec;
      if (std::filesystem::exists(candidate, ec)) {
        found = candidate;
        break;
      }
    }
    if (found.empty()) {
      errors.push_back(name + " is not in " + (here.parent_path() / "lib").string() + " (the build puts it there)");
      continue;
    }
    // RTLD_NOW: a plugin that cannot resolve a symbol fails here, with the loader's reason, not
    // halfway through a command.
    if (!dlopen(found.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      const char* why = dlerror();
      errors.push_back("cannot load " + found.string() + ": " + (why ? why : "unknown error"));
    }
  }
#endif
  return errors;
}

}  // namespace ht::cli
