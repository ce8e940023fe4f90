// Hugging Face configs in (issue 28): a model's public config.json becomes a model card, for the
// families the shipped cards cover. The mapping per family (`model_type`) is in
// patterns/models/README.md; the pattern is derived from the layer types (dense or MoE MLP,
// attention, MLA, gated DeltaNet, Mamba, MTP depths), written grouped as the shipped cards are
// (one bracket per decoder layer; Nemotron-H's own pattern as given). `--model config.json`
// reads one wherever a card is read; `hybrid-twin models import` writes the card and lists the
// fields it used and those it did not.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ht/schedule/model_card.hpp"

namespace ht::schedule {

struct HfImport {
  ModelCard card;
  std::string family;                // the config's model_type
  std::vector<std::string> used;     // config fields that shaped the card
  std::vector<std::string> not_used;  // every other field (none changes what the twin prices)
};

// Whether a JSON text is a Hugging Face config (an object with a string "model_type").
bool is_hf_config(std::string_view json_text);
// The JSON the import parses: Python's json module writes the floats JSON has no word for as bare
// NaN, Infinity and -Infinity (Nemotron-H's "time_step_limit": [0.0, Infinity]); outside strings
// they become the strings "NaN", "Infinity", "-Infinity", so a field the import reads that holds
// one is refused as not a number, by name, and one it does not read is listed as unused.
std::string python_constants_as_strings(std::string_view json_text);
// The card of a config; throws ScheduleError(BadModel) naming the field or the unknown family.
HfImport import_hf_config(std::string_view json_text, const std::string& where);
// The model_types import_hf_config knows.
std::vector<std::string> hf_families();
// A card as JSON text in the shipped cards' format (patterns/models/README.md).
std::string model_card_to_json(const ModelCard& card);

}  // namespace ht::schedule
