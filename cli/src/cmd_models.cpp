// `hybrid-twin models`: the shipped model cards (patterns/models/*.json) with the parameter counts
// the tool computes from their dimensions next to the published ones, or one card in full. The
// cards are what `simulate --model NAME` and `plan --model NAME` read.
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#include "ht/schedule/hf_config.hpp"
#include "ht/schedule/model_card.hpp"
#include "ht/schedule/params.hpp"

namespace ht::cli {
namespace {

namespace hs = ht::schedule;

struct ModelsArgs {
  std::string name;
  bool json_out = false;
  // models import CONFIG [-o CARD] [--name NAME]
  std::string config, output, card_name;
};

// The counts to compare with the published ones: the same definition (MTP, embeddings) as the
// card says the publication used.
struct Counted {
  double total = 0, active = 0;
};

Counted comparable(const hs::ModelCard& card, const hs::ModelParams& p) {
  Counted c;
  c.total = p.total - (card.published.includes_mtp ? 0.0 : p.mtp);
  c.active = p.active - p.mtp_active;
  if (!card.published.active_includes_embeddings) c.active -= p.embedding + p.output;
  return c;
}

std::string billions(double v) {
  if (v <= 0) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(v < 10e9 ? 2 : 1) << v / 1e9 << "B";
  return o.str();
}

std::string deviation(double ours, double published) {
  if (published <= 0) return "-";
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << 100 * (ours - published) / published << " %";
  return o.str();
}

nlohmann::json card_json(const hs::ModelCard& card) {
  const hs::ModelParams p = hs::count_params(ht::patterns::parse(card.pattern), card.dims);
  const Counted c = comparable(card, p);
  nlohmann::json j = {{"name", card.name},
                      {"description", card.description},
                      {"source", card.source},
                      {"pattern", card.pattern},
                      {"total_params", p.total},
                      {"active_params", p.active},
                      {"mtp_params", p.mtp},
                      {"embedding_params", p.embedding},
                      {"output_params", p.output},
                      {"comparable_total_params", c.total},
                      {"comparable_active_params", c.active}};
  if (card.published.total > 0)
    j["published"] = {{"total_params", card.published.total}, {"active_params", card.published.active},
                      {"includes_mtp", card.published.includes_mtp},
                      {"active_includes_embeddings", card.published.active_includes_embeddings},
                      {"source", card.published.source}};
  if (card.training_seq_len > 0) j["seq_len"] = card.training_seq_len;
  return j;
}

// `models import`: a Hugging Face config.json as a model card (hf_config.hpp), the fields it used
// and those it did not on stderr, the card on stdout or in -o.
int run_import(const ModelsArgs& a) {
  // Where the card goes is checked before anything is read or reported: a folder, a path that
  // cannot be written, or the config itself (which the card would replace) is refused first.
  if (!a.output.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(a.config, ec) && std::filesystem::equivalent(a.config, a.output, ec))
      throw UsageError("-o " + a.output + " is the config being imported; write the card to another file");
    io::check_output_file(a.output, "model card");
  }
  const std::string text = io::read_input_file(a.config, 16u << 20, "Hugging Face config");
  hs::HfImport imported = hs::import_hf_config(text, a.config);
  hs::ModelCard& card = imported.card;
  card.name = !a.card_name.empty() ? a.card_name : std::filesystem::path(a.config).stem().string();
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  const hs::ModelParams p = hs::count_params(ht::patterns::parse(card.pattern), card.dims);
  io::log::say("import") << imported.family << ", " << billions(p.total) << " parameters (" << billions(p.mtp)
                         << " of them MTP), " << billions(p.active) << " active per token\n"
                         << "import: used " << imported.used.size() << ": " << join(imported.used) << "\n"
                         << "import: not used " << imported.not_used.size() << (imported.not_used.empty() ? "" : ": ")
                         << join(imported.not_used);
  const std::string json = hs::model_card_to_json(card);
  if (a.output.empty()) {
    std::cout << json;
  } else {
    io::write_output_file(a.output, "model card", [&](std::ostream& out) { out << json; });
    io::log::Line("wrote", false) << "wrote " << a.output << " (use it as --model " << a.output << ")";
  }
  return 0;
}

int run(const ModelsArgs& a) {
  if (!a.name.empty()) {
    const hs::ModelCard card = hs::resolve_model(a.name);
    if (card.pattern.empty()) throw UsageError("'" + a.name + "' holds model dimensions, not a model card");
    nlohmann::json j = card_json(card);
    nlohmann::json dims = nlohmann::json::parse(hs::model_dims_to_json(card.dims));
    j["dims"] = dims;
    if (a.json_out) {
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::cout << card.name << ": " << card.description << "\nsource   " << card.source << "\npattern  "
              << card.pattern << "\nparams   " << billions(j["total_params"]) << " total ("
              << billions(j["mtp_params"]) << " of it MTP), " << billions(j["active_params"])
              << " active per token\n";
    if (card.published.total > 0)
      std::cout << "published " << billions(card.published.total) << " total, " << billions(card.published.active)
                << " active (" << card.published.source << ")\n";
    std::cout << "dims     " << dims.dump() << "\n";
    return 0;
  }
  nlohmann::json all = nlohmann::json::array();
  if (!a.json_out)
    std::cout << std::left << std::setw(26) << "model" << std::setw(10) << "total" << std::setw(10) << "active"
              << std::setw(12) << "published" << std::setw(10) << "active" << std::setw(9) << "total" << std::setw(9)
              << "active" << "pattern\n"
              << std::setw(26) << "" << std::setw(20) << "(computed)" << std::setw(22) << "(total / active)"
              << std::setw(18) << "(deviation)" << "\n";
  for (const std::string& name : hs::model_card_names()) {
    const hs::ModelCard card = hs::model_card(name);
    const nlohmann::json j = card_json(card);
    all.push_back(j);
    if (a.json_out) continue;
    const Counted c{j["comparable_total_params"], j["comparable_active_params"]};
    std::string pattern = card.pattern.size() > 40 ? card.pattern.substr(0, 37) + "..." : card.pattern;
    std::cout << std::setw(26) << name << std::setw(10) << billions(j["total_params"]) << std::setw(10)
              << billions(j["active_params"]) << std::setw(12) << billions(card.published.total) << std::setw(10)
              << billions(card.published.active) << std::setw(9) << deviation(c.total, card.published.total)
              << std::setw(9) << deviation(c.active, card.published.active) << pattern << "\n";
  }
  if (a.json_out) std::cout << all.dump(2) << "\n";
  else
    std::cout << "\nComputed from each card's dimensions; the deviations compare like with like (with or without "
                 "MTP and embeddings, as the card's source counts them). `hybrid-twin models NAME` shows one card.\n";
  return 0;
}

const Registration reg{{
    "models",
    "List the shipped model cards with their computed and published parameter counts, or show one",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ModelsArgs>();
      sub.add_option("NAME", a->name, "a card name or card FILE.json to show in full");
      sub.add_flag("--json", a->json_out, "print JSON");
      CLI::App* import = sub.add_subcommand(
          "import", "a Hugging Face config.json as a model card (families: llama, mistral, qwen2, qwen3, qwen3_moe, "
                    "mixtral, deepseek_v3, qwen3_next, nemotron_h, jamba)");
      import->add_option("CONFIG", a->config, "the model's config.json")->required();
      import->add_option("-o,--output", a->output, "write the card here (atomically) instead of stdout")
          ->check(kOutputPath);
      import->add_option("--name", a->card_name, "the card's name (default: the file's stem)");
      return [a, import] { return import->parsed() ? run_import(*a) : run(*a); };
    },
    25}};

}  // namespace
}  // namespace ht::cli
