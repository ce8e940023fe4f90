// Model cards: a real model's pattern and dimensions, from its public configuration files, with
// the source named and the published parameter counts to check the tool's own count against.
// The shipped cards (patterns/models/*.json) are compiled into the library; `--model NAME`
// picks one, `--model FILE.json` reads a card (or, as before cards existed, a bare object of
// ModelDims fields). Format: patterns/models/README.md.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ht/schedule/config.hpp"

namespace ht::schedule {

struct PublishedCounts {
  double total = 0;   // parameters, as published (0 = not published)
  double active = 0;  // parameters a token uses
  bool includes_mtp = false;                // the total counts the MTP depths' weights
  bool active_includes_embeddings = true;   // the active count counts embedding and output layer
  double active_rounding = 0;               // the active figure is rounded to this many parameters
  std::string source, note;
};

struct ModelCard {
  std::string name, description, source, pattern, extends;
  ModelDims dims;
  PublishedCounts published;
  int training_seq_len = 0;  // published pre-training sequence length (0 = not stated)
};

// Names of the shipped cards, sorted.
std::vector<std::string> model_card_names();
// A shipped card by name; throws ScheduleError(BadModel) listing the known names.
ModelCard model_card(std::string_view name);
// Parses a card (resolving "extends" against the shipped cards); throws BadModel naming the field.
ModelCard parse_model_card(std::string_view json_text, const std::string& where);
// Whether a JSON text is a card (an object with "pattern" and "dims") rather than bare dims.
bool is_model_card(std::string_view json_text);
// `--model` resolution: a shipped card name, a card file, or a bare-dims file (its card has no
// name, pattern or counts). Throws BadModel / Io.
ModelCard resolve_model(const std::string& name_or_file);

}  // namespace ht::schedule
