// Megatron-LM arguments in (issue 28): `plan`, `simulate` and `search --megatron-args FILE` read
// the command line or argument file a run is launched with and translate it into hybrid-twin's
// own flags (model fields, pattern, layout, step options, physics), which the command then parses
// as if they had been typed. Flags typed on the command line win over the file. The translation
// reports every argument it used and every one it ignored; an argument that would change the
// answer and that the twin cannot honour is refused, naming it.
//
// Accepted forms, mixed freely: a shell command line (`torchrun --nnodes 32 --nproc-per-node 8
// pretrain_gpt.py --num-layers 94 ...`, backslash continuations, quotes, # comments), one
// argument per line, and the `--flag: value` lines of the Megatron MoE Model Zoo's YAML files
// (`true` turns a switch on, `false` leaves it off). Tokens before a `*.py` script are the
// launcher's: its --nnodes x --nproc-per-node give the world size.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ht/schedule/model_card.hpp"

namespace ht::cli {

struct MegatronTranslation {
  std::vector<std::string> args;     // hybrid-twin flags and values, in order
  std::vector<std::string> used;     // Megatron arguments that shaped them ("--num-layers 94")
  std::vector<std::string> ignored;  // arguments that change nothing the twin predicts
  std::vector<std::string> approximated;  // change a real run in ways the twin does not model
};

// `text` is the file's contents; `card` (or null) is the --model card that supplies the model, so
// only the model fields the arguments state are emitted (otherwise Megatron's defaults fill the
// rest) and a layer count builds the card's kind of layers (MoE, MLA) unless the arguments say;
// `vocab_typed`: --vocab is typed on the command line, so an unknown vocabulary is no error;
// `typed_pattern`: the --pattern typed on the command line (it wins over the file's), which decides
// with the file's pattern whether the model has Mamba layers, whose arguments are read only then.
// Throws UsageError naming the argument for input it cannot honour.
MegatronTranslation translate_megatron_args(const std::string& text, const schedule::ModelCard* card,
                                            bool vocab_typed = false,
                                            const std::optional<std::string>& typed_pattern = std::nullopt);

// Replaces `--megatron-args FILE` (or `--megatron-args=FILE`) in a plan/simulate/search command
// line by the translation of FILE, dropping translated flags the command line gives itself, and
// writes the used/ignored summary (lines for stderr) to `report`: main() prints it once the
// command has run, so that a refused run answers in one line. `accepts(flag)` says whether the
// command has that option (what it lacks is left out and listed). Returns the arguments
// unchanged without the flag.
std::vector<std::string> expand_megatron_args(const std::vector<std::string>& argv,
                                              const std::function<bool(const std::string&)>& accepts,
                                              std::string& report);

// Registers --megatron-args on a command for --help and --check-args (main() has expanded it
// before the command line is parsed).
inline void add_megatron_args_flag(CLI::App& sub) {
  static std::string unused;
  sub.add_option("--megatron-args", unused,
                 "a Megatron-LM command line or argument file (also the Model Zoo's YAML '--flag: value' lines): "
                 "model, layout and step translated into this command's flags; flags typed here win");
}

}  // namespace ht::cli
