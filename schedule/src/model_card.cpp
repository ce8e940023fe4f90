// Model cards (see model_card.hpp).
#include "ht/schedule/model_card.hpp"

#include "ht/schedule/hf_config.hpp"

#include <algorithm>
#include <cstddef>

#include <nlohmann/json.hpp>

#include "ht/schedule/error.hpp"
#include "files.hpp"

namespace ht::schedule {
namespace detail {
struct EmbeddedCard {
  const char* name;
  const char* json;
};
extern const EmbeddedCard kEmbeddedCards[];
extern const std::size_t kEmbeddedCardCount;
}  // namespace detail

namespace {

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadModel, message); }

const char* embedded(std::string_view name) {
  for (std::size_t i = 0; i < detail::kEmbeddedCardCount; ++i)
    if (name == detail::kEmbeddedCards[i].name) return detail::kEmbeddedCards[i].json;
  return nullptr;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
  if (!j.contains(key)) {
    if (required) bad(where + ": the card lacks \"" + key + "\"");
    return "";
  }
  if (!j[key].is_string()) bad(where + ": \"" + key + "\" must be a string");
  return j[key].get<std::string>();
}

double count_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return 0;
  if (!j[key].is_number() || j[key].get<double>() < 0) bad(where + ": \"" + key + "\" must be a number >= 0");
  return j[key].get<double>();
}

bool bool_field(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_boolean()) bad(where + ": \"" + key + "\" must be true or false");
  return j[key].get<bool>();
}

}  // namespace

std::vector<std::string> model_card_names() {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < detail::kEmbeddedCardCount; ++i) out.emplace_back(detail::kEmbeddedCards[i].name);
  std::sort(out.begin(), out.end());
  return out;
}

bool is_model_card(std::string_view text) {
  try {
    const auto j = detail::parse_json(text, "model file", ErrorCode::BadModel);
    // Any of a card's own fields makes it a card (and a card lacking "pattern" or "dims" is told
    // so), not bare dimensions refused for their first unknown field.
    if (!j.is_object()) return false;
    for (const char* k : {"pattern", "dims", "extends", "name", "description", "source", "published", "training", "notes"})
      if (j.contains(k)) return true;
    return false;
  } catch (const ScheduleError&) {
    return false;
  }
}

ModelCard parse_model_card(std::string_view text, const std::string& where) {
  const nlohmann::json j = detail::parse_json(text, "model card " + where, ErrorCode::BadModel);
  if (!j.is_object()) bad(where + ": a model card is one JSON object");
  static const char* known[] = {"name", "description", "source", "pattern", "extends", "dims",
                                "published", "training", "notes"};
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return key == k; }) == std::end(known))
      bad(where + ": unknown card field \"" + key + "\" (known: name, description, source, pattern, extends, dims, "
                  "published, training, notes)");
  }
  ModelCard card;
  card.extends = string_field(j, "extends", where, false);
  if (!card.extends.empty()) {
    if (card.extends == string_field(j, "name", where, false)) bad(where + ": a card cannot extend itself");
    const char* base = embedded(card.extends);
    if (base == nullptr) bad(where + ": \"extends\" names the unknown card '" + card.extends + "'");
    const ModelCard parent = parse_model_card(base, card.extends);
    card.dims = parent.dims;
    card.source = parent.source;
    card.training_seq_len = parent.training_seq_len;
  }
  card.name = string_field(j, "name", where, false);
  card.description = string_field(j, "description", where, false);
  if (j.contains("source")) card.source = string_field(j, "source", where, false);
  card.pattern = string_field(j, "pattern", where, true);
  if (j.contains("training")) {
    const auto& t = j["training"];
    if (!t.is_object()) bad(where + ": \"training\" must be an object");
    if (t.contains("seq_len")) {
      if (!t["seq_len"].is_number_integer() || t["seq_len"].get<long long>() < 1 || t["seq_len"].get<long long>() > (1 << 24))
        bad(where + ": training.seq_len must be an integer in [1, 16777216]");
      card.training_seq_len = t["seq_len"].get<int>();
    }
  }
  if (card.training_seq_len > 0) card.dims.seq_len = card.training_seq_len;
  if (j.contains("dims")) {
    if (!j["dims"].is_object()) bad(where + ": \"dims\" must be an object of model fields");
    try {
      // model_dims_from_json applies the fields over ModelDims' defaults; apply over the base.
      const ModelDims given = model_dims_from_json(j["dims"].dump());
      for (const ModelField& f : model_fields())
        if (j["dims"].contains(std::string(f.name))) card.dims.*f.member = given.*f.member;
    } catch (const ScheduleError& e) {
      bad(where + ": " + std::string(e.what()).substr(std::string("model: ").size()));
    }
  } else if (card.extends.empty()) {
    bad(where + ": the card lacks \"dims\"");
  }
  // Nested objects name their fields too: an unknown one is a typo, never ignored.
  auto known_fields = [&](const char* object, std::initializer_list<const char*> names) {
    if (!j.contains(object) || !j[object].is_object()) return;
    for (const auto& item : j[object].items()) {
      bool ok = false;
      std::string list;
      for (const char* n : names) ok = ok || item.key() == n, list += (list.empty() ? "" : ", ") + std::string(n);
      if (!ok)
        bad(where + ": unknown field \"" + std::string(object) + "." + item.key().substr(0, 40) + "\" (known: " + list +
            ")");
    }
  };
  known_fields("training", {"seq_len", "source", "note"});
  known_fields("published", {"total_params", "active_params", "includes_mtp", "active_includes_embeddings",
                             "active_rounding", "source", "note"});
  if (j.contains("published")) {
    const auto& p = j["published"];
    if (!p.is_object()) bad(where + ": \"published\" must be an object");
    const std::string at = where + " published";
    card.published.total = count_field(p, "total_params", at);
    card.published.active = count_field(p, "active_params", at);
    card.published.includes_mtp = bool_field(p, "includes_mtp", false, at);
    card.published.active_includes_embeddings = bool_field(p, "active_includes_embeddings", true, at);
    card.published.active_rounding = count_field(p, "active_rounding", at);
    card.published.source = string_field(p, "source", at, false);
    card.published.note = string_field(p, "note", at, false);
  }
  validate(card.dims);
  return card;
}

ModelCard model_card(std::string_view name) {
  const char* text = embedded(name);
  if (text == nullptr) {
    std::string names;
    for (const auto& n : model_card_names()) names += (names.empty() ? "" : ", ") + n;
    bad("unknown model '" + std::string(name) + "' (shipped cards: " + names + "; or a FILE.json)");
  }
  ModelCard card = parse_model_card(text, std::string(name));
  if (card.name.empty()) card.name = std::string(name);
  return card;
}

ModelCard resolve_model(const std::string& name_or_file) {
  if (embedded(name_or_file) != nullptr) return model_card(name_or_file);
  const bool looks_like_file = name_or_file.find('/') != std::string::npos || name_or_file.ends_with(".json");
  if (!looks_like_file && !std::filesystem::exists(name_or_file)) return model_card(name_or_file);  // its error lists names
  const std::string text = detail::read_text(name_or_file, "model file");
  if (is_model_card(text)) return parse_model_card(text, name_or_file);
  if (is_hf_config(text)) return import_hf_config(text, name_or_file).card;
  ModelCard bare;
  bare.dims = load_model_dims(name_or_file);
  return bare;
}

}  // namespace ht::schedule
