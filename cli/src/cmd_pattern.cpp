// `hybrid-twin pattern`: validate a pattern and show how Megatron's HybridModel would lay it out:
// logical/physical layers, pipeline stages and the checkpoint keys each layer publishes.
#include <iomanip>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/pipeline.hpp"

namespace ht::cli {
namespace {

using nlohmann::json;
namespace hp = ht::patterns;

struct PatternArgs {
  std::string pattern;
  int pp = 1;
  int vpp = 0;
  int first = -1, last = -1;
  bool json_out = false;
  bool gpt_map = false;
  bool no_namespace_check = false;
};

std::string item_text(const hp::Item& it) { return it.grouped ? "[" + it.symbols + "]" : it.symbols; }

struct LayerRow {
  int logical, physical_first, physical_last, pp_rank, vp_stage;
  std::string symbols;
  std::vector<std::string> key_prefixes;
};

int run(const PatternArgs& a) {
  hp::ParseOptions options;
  options.check_namespaces = !a.no_namespace_check;
  const hp::ParsedPattern parsed = hp::parse(a.pattern, options);
  hp::PipelineConfig config;
  config.pp = a.pp;
  if (a.vpp > 0) config.vpp = a.vpp;
  if (a.first >= 0) config.first_stage_layers = a.first;
  if (a.last >= 0) config.last_stage_layers = a.last;
  const auto stages = hp::allocate_stages(parsed, config);
  const auto keys = hp::layer_keys(parsed);

  std::vector<LayerRow> rows;
  for (const auto& stage : stages) {
    int physical = stage.physical_offset;
    for (std::size_t i = 0; i < stage.items.size(); ++i) {
      const auto& item = stage.items[i];
      LayerRow row{stage.logical_offset + static_cast<int>(i), physical, physical + item.physical_count() - 1,
                   stage.pp_rank, stage.vp_stage, item_text(item), {}};
      for (int p = row.physical_first; p <= row.physical_last; ++p)
        for (const auto& prefix : keys[static_cast<std::size_t>(p)].namespace_prefixes()) row.key_prefixes.push_back(prefix);
      physical += item.physical_count();
      rows.push_back(std::move(row));
    }
  }
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.logical < y.logical; });
  const auto counts = hp::layer_counts(parsed);

  if (a.json_out) {
    json j;
    j["pattern"] = parsed.text;
    j["main"] = parsed.main;
    j["mtp"] = parsed.mtp_depths ? json(parsed.mtp) : json(nullptr);
    j["mtp_depths"] = parsed.mtp_depths;
    j["physical_layers"] = parsed.physical_count();
    j["logical_layers"] = parsed.logical_count();
    j["grouped"] = parsed.has_groups();
    json c = json::object();
    for (auto [sym, n] : counts) c[std::string(1, sym)] = n;
    j["counts"] = c;
    j["layers"] = json::array();
    for (const auto& r : rows)
      j["layers"].push_back({{"logical", r.logical}, {"physical_first", r.physical_first},
                             {"physical_last", r.physical_last}, {"symbols", r.symbols},
                             {"pp_rank", r.pp_rank}, {"vp_stage", r.vp_stage}, {"key_prefixes", r.key_prefixes}});
    j["stages"] = json::array();
    for (const auto& s : stages) {
      json items = json::array();
      for (const auto& it : s.items) items.push_back(item_text(it));
      j["stages"].push_back({{"pp_rank", s.pp_rank}, {"vp_stage", s.vp_stage},
                             {"physical_offset", s.physical_offset}, {"logical_offset", s.logical_offset},
                             {"items", items}});
    }
    j["final_norm_key"] = hp::final_norm_prefix(parsed);
    j["mtp_prefixes"] = hp::mtp_layer_prefixes(parsed);
    if (a.gpt_map) {
      const auto map = hp::gpt_layer_map(parsed);
      json g;
      for (auto [p, k] : map.attention) g["attention"][std::to_string(p)] = k;
      for (auto [p, k] : map.mlp) g["mlp"][std::to_string(p)] = k;
      g["fresh"] = map.fresh;
      j["gpt_map"] = g;
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }

  std::cout << "pattern  " << parsed.text << "\n"
            << "layers   " << parsed.physical_count() << " physical, " << parsed.logical_count() << " logical"
            << (parsed.has_groups() ? " (grouped)" : "") << "\n";
  if (parsed.mtp_depths) std::cout << "mtp      '" << parsed.mtp << "' x " << parsed.mtp_depths << " depths\n";
  std::cout << "\n" << std::left << std::setw(8) << "logical" << std::setw(10) << "physical" << std::setw(10)
            << "symbols" << std::setw(8) << "pp" << std::setw(6) << "vp" << "checkpoint key prefixes\n";
  for (const auto& r : rows) {
    std::ostringstream range;
    range << r.physical_first;
    if (r.physical_last != r.physical_first) range << "-" << r.physical_last;
    std::string prefixes;
    for (const auto& p : r.key_prefixes) prefixes += (prefixes.empty() ? "" : " ") + p;
    std::cout << std::setw(8) << r.logical << std::setw(10) << range.str() << std::setw(10) << r.symbols
              << std::setw(8) << r.pp_rank << std::setw(6) << r.vp_stage << prefixes << "\n";
  }
  std::cout << "final norm: " << hp::final_norm_prefix(parsed) << "*\n\nstages\n"
            << std::setw(8) << "pp" << std::setw(6) << "vp" << std::setw(10) << "physical" << std::setw(9)
            << "logical" << "items\n";
  for (const auto& s : stages) {
    std::string items;
    for (const auto& it : s.items) items += item_text(it);
    std::cout << std::setw(8) << s.pp_rank << std::setw(6) << s.vp_stage << std::setw(10) << s.physical_offset
              << std::setw(9) << s.logical_offset << (items.empty() ? "(empty)" : items) << "\n";
  }
  std::cout << "\ncounts  ";
  for (auto [sym, n] : counts)
    if (n) std::cout << " " << sym << "=" << n;
  std::cout << "\n";
  if (a.gpt_map) {
    const auto map = hp::gpt_layer_map(parsed);
    std::cout << "\nGPT import map (physical -> GPT layer)\n  attention:";
    for (auto [p, k] : map.attention) std::cout << " " << p << "->" << k;
    std::cout << "\n  mlp:      ";
    for (auto [p, k] : map.mlp) std::cout << " " << p << "->" << k;
    std::cout << "\n  fresh:    ";
    for (int p : map.fresh) std::cout << " " << p;
    std::cout << "\n";
  }
  return 0;
}

const Registration reg{{
    "pattern",
    "Validate a hybrid layer pattern and show its layers, pipeline stages and checkpoint keys",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<PatternArgs>();
      sub.add_option("--pattern,PATTERN", a->pattern, "hybrid layer pattern, e.g. 'M[*E]M[*E]-' or 'M*|M-/*E'")->required();
      sub.add_option("--pp", a->pp, "pipeline-parallel size")->check(kPositive);
      sub.add_option("--vpp", a->vpp, "virtual pipeline stages per rank (needs '|' in the pattern)")
          ->check(kPositive);
      sub.add_option("--first-stage-layers", a->first, "layers on the first stage (legacy pipe-less split)")
          ->check(kNonNegative);
      sub.add_option("--last-stage-layers", a->last, "layers on the last stage (legacy pipe-less split)")
          ->check(kNonNegative);
      sub.add_flag("--gpt-map", a->gpt_map, "also show how a GPT checkpoint's layers map onto this pattern");
      sub.add_flag("--no-namespace-check", a->no_namespace_check,
                   "accept groups whose members share a checkpoint namespace (rule G5)");
      sub.add_flag("--json", a->json_out, "print one JSON object instead of tables");
      return [a] { return run(*a); };
    },
    10}};

}  // namespace
}  // namespace ht::cli
