// hybrid-twin: one executable with subcommands (pattern, simulate, train, verify, fuzz, trace); the
// ones that need SimGrid or the engine come from plugins opened on demand (plugins.hpp).
// Errors on user input become one line "error: ..." on stderr and exit code 2; a pattern error
// also shows the pattern with a caret under the offending character. SIGINT/SIGTERM remove the
// temporary files of outputs being written (ht::io); a command that stops cleanly on them (train)
// exits 128 + the signal.
// Two hidden ways to parse without running (scripts/check-doc-commands uses them to check that
// every command shown in README.md and docs/ still parses, without a GPU or earlier outputs):
//   hybrid-twin --check-args <command> ...   parses one command line, exits 0 when it parses;
//   hybrid-twin --check-args-from FILE       one JSON array of arguments per line, each parsed on
//                                            its own; prints "ok" or "error: ..." per line, exits
//                                            1 if any failed (one process: the libraries load once).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <new>
#include <sstream>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ht/io/child_process.hpp"
#include "command.hpp"
#include "megatron_args.hpp"
#include "plugins.hpp"
#include "ht/io/error.hpp"
#include "ht/io/interrupt.hpp"
#include "ht/io/log.hpp"
#include "ht/patterns/error.hpp"

namespace ht::cli {
namespace {

// A report of several lines (--megatron-args' used and ignored arguments), line by line.
void say_lines(std::string_view category, const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) io::log::Line(category, false) << line;
}

// A pattern that starts with '-' ("-M-") reads as an option to the parser; the parse error alone
// ("PATTERN is required", "unexpected argument") does not say why.
std::string dash_pattern_hint(int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-' || arg[1] == '-') continue;
    if (arg.find_first_not_of("-MG*D+CHWE[]|/") == std::string::npos)
      return "'" + arg + "' starts with '-', so it reads as an option: put '--' before a pattern that starts with "
             "'-' (hybrid-twin " + std::string(argv[1]) + " -- '" + arg + "'), or write --pattern='" + arg + "'";
  }
  return "";
}

// An error message as one line a terminal shows as text: control bytes (newlines, escape
// sequences) written as \xNN, and at most 2000 bytes of it (a 100 KB argument is not echoed).
std::string printable(std::string_view text) {
  constexpr std::size_t kCap = 2000;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kCap; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > kCap) out += "... (" + std::to_string(text.size() - kCap) + " more bytes)";
  return out;
}

// Commands that run in an executable of their own beside this one: `fuzz` drives rapidcheck,
// which Debian ships only as an archive for executables, so it cannot live in a plugin. The
// command word forwards the whole command line to it (exec), --help and --check-args included.
struct Helper {
  const char* command;
  const char* file;
  const char* description;
};
#ifdef HT_CLI_FUZZ_HELPER
constexpr Helper kHelpers[] = {{"fuzz", HT_CLI_FUZZ_HELPER,
                                "Fuzz the verifier's named properties (patterns, plans, twin, engine) and replay "
                                "counterexamples"}};
#else
constexpr Helper kHelpers[] = {{"", "", ""}};
#endif

std::string helper_path(const std::string& command) {
  for (const Helper& h : kHelpers) {
    if (command.empty() || command != h.command) continue;
    const auto path = executable_folder() / h.file;
    std::error_code ec;
    return std::filesystem::exists(path, ec) ? path.string() : "";
  }
  return "";
}

}  // namespace
}  // namespace ht::cli

namespace {

int check_args_from(CLI::App& app, const std::string& file) {
  std::ifstream in(file);
  if (!in) {
    ht::io::log::say("error") << "cannot read '" << file << "'";
    return 2;
  }
  bool all_parsed = true;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> args;
    try {
      args = nlohmann::json::parse(line).get<std::vector<std::string>>();
    } catch (const std::exception& e) {
      ht::io::log::say("error") << "'" << file << "': a line is not a JSON array of strings (" << e.what() << ")";
      return 2;
    }
    std::string verdict = "ok";
    if (const std::string helper = args.empty() ? "" : ht::cli::helper_path(args.front()); !helper.empty()) {
      // A helper's command: the helper parses it (--check-args); its first line says why not.
      std::vector<std::string> check{"--check-args"};
      check.insert(check.end(), args.begin(), args.end());
      std::string err;
      const int rc = ht::io::run_capture_stderr(helper, check, err);
      if (rc != 0) verdict = rc == 2 ? err.substr(0, err.find('\n')) : "error: " + helper + " did not answer";
    } else {
      std::reverse(args.begin(), args.end());  // CLI11 takes a vector's arguments from its back
      app.clear();
      try {
        app.parse(args);
      } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() != 0) verdict = std::string("error: ") + e.what();  // --help parses
      }
    }
    std::replace(verdict.begin(), verdict.end(), '\n', ' ');
    all_parsed &= verdict == "ok";
    std::cout << verdict << "\n";
  }
  return all_parsed ? 0 : 1;
}

// "12", "-3": an optional minus and decimal digits, nothing else.
bool plain_decimal(std::string_view v) {
  if (!v.empty() && v.front() == '-') v.remove_prefix(1);
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "0x1p3", "-0X2": a hexadecimal number (std::strtod reads them).
bool hex_number(std::string_view v) {
  if (!v.empty() && (v.front() == '-' || v.front() == '+')) v.remove_prefix(1);
  return v.size() > 1 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
}

}  // namespace

int main(int argc, char** argv) {
  ht::io::install_interrupt_handlers();
  try {
    const char* spec = std::getenv("HYBRID_TWIN_LOG");
    ht::io::log::configure(spec ? spec : "");
  } catch (const std::exception& e) {
    ht::io::log::error() << e.what();
    return 2;
  }
  CLI::App app{"hybrid-twin: design, simulate, train and verify grouped hybrid models with "
               "expert-parallel overlap"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hybrid-twin 0.1.0");
  bool check_args = false;
  app.add_flag("--check-args", check_args, "parse the command line, run nothing, exit 0")->group("");
  auto& commands = ht::cli::registry();
  // The command word: the first argument that is not an option. One the executable holds itself
  // runs without opening the plugins; any other (or none: --help) opens them first.
  std::string word;
  for (int i = 1; i < argc && word.empty(); ++i)
    if (argv[i][0] != '-') word = argv[i];
  const auto holds = [&](const std::string& name) {
    return std::any_of(commands.begin(), commands.end(), [&](const auto& c) { return c.name == name; });
  };
  if (!word.empty() && !holds(word)) {
    if (const std::string helper = ht::cli::helper_path(word); !helper.empty()) {
      execv(helper.c_str(), argv);
      ht::io::log::say("error") << "cannot run " << helper << ": " << std::strerror(errno);
      return 2;
    }
  }
  // --version needs no command; --help and a word this executable does not hold need them all.
  const bool version_only = argc == 2 && std::string_view(argv[1]) == "--version";
  if (!version_only && (word.empty() || !holds(word))) {
    for (const auto& h : ht::cli::kHelpers)  // listed in --help; their options are the helper's
      if (!ht::cli::helper_path(h.command).empty() && !holds(h.command))
        commands.push_back({h.command, h.description, [](CLI::App& sub) -> std::function<int()> {
                              sub.allow_extras();
                              return [] { return 2; };
                            }, 90});
    const std::vector<std::string> failed = ht::cli::load_command_plugins();
    if (!failed.empty() && !word.empty() && !holds(word) && std::string_view(argv[1]) != "--check-args-from") {
      ht::io::log::say("error") << "'" << ht::cli::printable(word)
                                << "' is not a command this build could open: " << ht::cli::printable(failed.front());
      return 2;
    }
    for (const auto& why : failed) ht::io::log::say("note") << "some commands are missing: " << ht::cli::printable(why);
  }
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.order < b.order; });
  std::map<CLI::App*, std::function<int()>> actions;
  try {
    for (auto& spec : commands) {
      CLI::App* sub = app.add_subcommand(spec.name, spec.description);
      actions[sub] = spec.setup(*sub);
    }
  } catch (const std::exception& e) {
    ht::io::log::Line("error", false) << "internal error while building the command line: " << e.what();
    return 3;
  }
  if (argc == 3 && std::string_view(argv[1]) == "--check-args-from") return check_args_from(app, argv[2]);
  std::vector<std::string> args(argv, argv + argc);
  std::string megatron_report;  // what --megatron-args used and ignored: printed after the command ran
  try {
    args = ht::cli::expand_megatron_args(args, [&](const std::string& flag) {
      for (CLI::App* sub : app.get_subcommands({}))
        if (args.size() > 1 && sub->get_name() == args[1]) return sub->get_option_no_throw(flag) != nullptr;
      return false;
    }, megatron_report);
  } catch (const std::exception& e) {
    ht::io::log::say("error") << ht::cli::printable(e.what());
    return 2;
  }
  // A first word that is no option and no command: name it and the commands there are.
  if (args.size() > 1 && !args[1].empty() && args[1][0] != '-') {
    bool known = false;
    std::string names;
    for (CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == args[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      ht::io::log::say("error") << "'" << ht::cli::printable(args[1]) << "' is not a command (" << names
                                << "); see 'hybrid-twin --help'";
      return 2;
    }
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);  // CLI11 takes them from the back
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line: the reason, a hint where one applies, and where the usage is.
    std::string line = "error: " + ht::cli::printable(e.what());
    if (const std::string hint = ht::cli::dash_pattern_hint(argc, argv); !hint.empty())
      line += " (" + ht::cli::printable(hint) + ")";
    std::string command = "<command>";
    for (CLI::App* sub : app.get_subcommands({}))
      if (args.size() > 1 && sub->get_name() == args[1]) command = args[1];
    ht::io::log::Line("error", false) << line << "; see 'hybrid-twin " << command << " --help'";
    return 2;
  }
  // A value option given an empty value ('--gated-ffn ""') would read as 0 or as not given: refused.
  for (CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed())
      for (const CLI::Option* opt : sub->get_options())
        if (opt->get_type_size() > 0)
          for (const std::string& value : opt->results())
            if (value.empty()) {
              ht::io::log::say("error") << opt->get_name()
                                        << " was given an empty value; give one or leave the option out";
              return 2;
            }
  // Numbers are written in decimal: CLI11 also reads '0x10', '0b11', '0o7', '+4', digit separators
  // and hexadecimal floats, which a command line of this tool never means (a hex size is a slip).
  for (CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed())
      for (const CLI::Option* opt : sub->get_options()) {
        const std::string type = opt->get_type_name();
        const bool whole = type.starts_with("INT") || type.starts_with("UINT");
        if (!whole && !type.starts_with("FLOAT")) continue;
        for (const std::string& value : opt->results())
          if (whole ? !plain_decimal(value) : hex_number(value)) {
            ht::io::log::say("error") << opt->get_name() << " = '" << ht::cli::printable(value) << "' is not a "
                                      << (whole ? "whole number in decimal digits" : "decimal number");
            return 2;
          }
      }
  if (check_args) {
    ht::cli::say_lines("megatron-args", megatron_report);
    return 0;
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) {
        const int status = action();
        // A refusal answers in its one line instead.
        if (status != 2) ht::cli::say_lines("megatron-args", megatron_report);
        return status;
      }
    return 2;
  } catch (const ht::patterns::PatternError& e) {
    ht::io::log::say("error") << ht::cli::printable(e.what());
    std::istringstream caret(e.caret_line());  // the pattern and its caret, each line made printable
    for (std::string line; std::getline(caret, line);) ht::io::log::Line("error", false) << ht::cli::printable(line);
    return 2;
  } catch (const ht::io::IoError& e) {
    ht::io::log::say("error") << ht::cli::printable(e.what());
    if (e.code() == ht::io::IoErrorCode::Interrupted && ht::io::interrupt_signal() != 0)
      return 128 + ht::io::interrupt_signal();
    return 2;
  } catch (const std::bad_alloc&) {
    ht::io::log::say("error") << "out of memory: the input asks for more memory than this process may use "
                                 "(reduce the sizes it gives, or raise the memory limit)";
    return 2;
  } catch (const std::exception& e) {
    ht::io::log::say("error") << ht::cli::printable(e.what());
    return 2;
  }
}
