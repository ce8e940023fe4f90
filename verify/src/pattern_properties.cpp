// Pattern properties (reference sections 1, 2 and 4): generated valid patterns parse to exactly
// the generated structure, print and parse back, count, flatten, number and key their layers as
// the reference says, tile pipeline stages; every single-rule violation is rejected with that
// rule and caret. Oracles: the generator's own model of the pattern and the tables of reference
// sections 1.1 and 2.5 written out again here, never the parser's output.
#include <map>
#include <set>

#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/error.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/pipeline.hpp"
#include "ht/verify/namespace_oracle.hpp"
#include "ht/verify/pattern_gen.hpp"
#include "ht/verify/pipeline_gen.hpp"
#include "property_groups.hpp"

namespace ht::verify::detail {
namespace {

using patterns::Item;
using patterns::ParsedPattern;
using patterns::PatternError;

// ---- cases <-> generator values ----------------------------------------------------------------

Case model_case(const gen::PatternModel& m) {
  Case segments = Case::array();
  for (const auto& seg : m.segments) {
    Case items = Case::array();
    for (const Item& it : seg) items.push_back(it.grouped ? "[" + it.symbols + "]" : it.symbols);
    segments.push_back(std::move(items));
  }
  return {{"pattern", m.text()}, {"world", m.world}, {"segments", std::move(segments)},
          {"mtp", m.mtp}, {"mtp_repeats", m.mtp_repeats}};
}

gen::PatternModel model_from(const Case& c) {
  gen::PatternModel m;
  m.world = c.at("world").get<std::string>();
  for (const auto& seg : c.at("segments")) {
    std::vector<Item> items;
    for (const auto& it : seg) {
      const std::string s = it.get<std::string>();
      items.push_back(!s.empty() && s.front() == '[' ? Item{s.substr(1, s.size() - 2), true, 0} : Item{s, false, 0});
    }
    m.segments.push_back(std::move(items));
  }
  m.mtp = c.at("mtp").get<std::string>();
  m.mtp_repeats = c.at("mtp_repeats").get<int>();
  return m;
}

std::string pattern_of(const Case& c) { return c.at("pattern").get<std::string>(); }

rc::Gen<gen::PatternModel> base_model(const FuzzContext& ctx) {
  if (ctx.pattern) return rc::gen::just(gen::model_of(patterns::parse(*ctx.pattern)));
  return gen::valid_pattern();
}

// Properties over valid patterns: the fixed pattern when given, generated ones otherwise.
CaseSource valid_cases(const FuzzContext& ctx) {
  return {rc::gen::map(base_model(ctx), [](const gen::PatternModel& m) { return model_case(m); }), ""};
}

// ---- the reference's tables, written out again as oracles ----------------------------------

std::string show(const std::vector<Item>& items) {
  std::string out;
  for (const Item& it : items) out += it.grouped ? "[" + it.symbols + "]" : it.symbols;
  return out;
}

// ---- checks ------------------------------------------------------------------------------------

void check_parse_structure(const Case& c) {
  const gen::PatternModel m = model_from(c);
  const ParsedPattern p = patterns::parse(m.text());
  expect(p.text == m.text(), "parsed text differs from the input");
  if (p.main != m.main_text()) fail("main part is '" + p.main + "', expected '" + m.main_text() + "'");
  if (m.main_text().empty()) {
    expect(p.segments.empty(), "an empty main pattern has segments");
  } else {
    if (p.segment_count() != static_cast<int>(m.segments.size()))
      fail(std::to_string(p.segment_count()) + " segments, expected " + std::to_string(m.segments.size()));
    for (std::size_t s = 0; s < m.segments.size(); ++s)
      if (!(p.segments[s].items == m.segments[s]))
        fail("segment " + std::to_string(s) + " parsed as '" + show(p.segments[s].items) + "', expected '" +
             show(m.segments[s]) + "'");
  }
  if (p.mtp_depths != m.expected_depth())
    fail("MTP depth " + std::to_string(p.mtp_depths) + ", expected " + std::to_string(m.expected_depth()));
  expect(p.mtp == (m.expected_depth() > 0 ? m.mtp : std::string()), "MTP pattern differs");
}

void check_roundtrip(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const std::string printed = patterns::to_string(p);
  const ParsedPattern again = patterns::parse(printed);
  if (!(again == p)) fail("parse(to_string(p)) != p; printed '" + printed + "'");
  expect(patterns::to_string(again) == printed, "printing is not stable");
}

void check_counts(const Case& c) {
  const gen::PatternModel m = model_from(c);
  const ParsedPattern p = patterns::parse(m.text());
  if (p.physical_count() != static_cast<int>(m.flattened().size()))
    fail("physical count " + std::to_string(p.physical_count()) + ", expected " + std::to_string(m.flattened().size()));
  expect(p.flattened_symbols() == m.flattened(), "flattened symbols differ");
  if (p.logical_count() != static_cast<int>(m.items().size()))
    fail("logical count " + std::to_string(p.logical_count()) + ", expected " + std::to_string(m.items().size()));
  std::map<char, int> expected;
  for (char s : m.flattened()) ++expected[s];
  for (char s : m.mtp) expected[s] += m.expected_depth();
  for (const auto& [symbol, n] : patterns::layer_counts(p)) {
    const int want = expected.count(symbol) ? expected[symbol] : 0;
    if (n != want)
      fail(std::string("count of '") + symbol + "' is " + std::to_string(n) + ", expected " + std::to_string(want));
  }
}

void check_flatten(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const ParsedPattern flat = patterns::flatten(p);
  expect(!flat.has_groups(), "flatten left a group");
  expect(flat.flattened_symbols() == p.flattened_symbols(), "flatten changed the physical order");
  expect(flat.segment_count() == p.segment_count(), "flatten changed the segment count");
  expect(flat.mtp == p.mtp && flat.mtp_depths == p.mtp_depths, "flatten changed the MTP part");
  const auto keys = patterns::layer_keys(flat);
  expect(static_cast<int>(keys.size()) == p.physical_count(), "flattened keys do not cover every layer");
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (keys[i].key_prefix != "decoder.layers." + std::to_string(i) + ".")
      fail("flattened layer " + std::to_string(i) + " keyed '" + keys[i].key_prefix + "'");
}

// Reference section 2.5: every member of logical layer L publishes decoder.layers.L.<its own
// namespaces>; physical indices are global and contiguous.
void check_logical_keys(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const auto keys = patterns::layer_keys(p);
  std::size_t k = 0;
  const auto items = p.items();
  for (std::size_t logical = 0; logical < items.size(); ++logical)
    for (char s : items[logical].symbols) {
      if (k >= keys.size()) fail("fewer keys than physical layers");
      const auto& key = keys[k];
      const std::string where = "physical layer " + std::to_string(k);
      if (key.symbol != s) fail(where + " has symbol '" + std::string(1, key.symbol) + "'");
      if (key.physical != static_cast<int>(k)) fail(where + " numbered " + std::to_string(key.physical));
      if (key.logical != static_cast<int>(logical))
        fail(where + " keyed under logical " + std::to_string(key.logical) + ", expected " + std::to_string(logical));
      if (key.key_prefix != "decoder.layers." + std::to_string(logical) + ".")
        fail(where + " prefix '" + key.key_prefix + "'");
      if (key.namespaces != owned_namespaces(s)) fail(where + " owns the wrong namespaces");
      ++k;
    }
  expect(k == keys.size(), "more keys than physical layers");
  const std::string final_norm = patterns::final_norm_prefix(p);
  const bool grouped = p.main.find('[') != std::string::npos;
  if (final_norm != (grouped ? "decoder.final_layernorm." : "decoder.final_norm."))
    fail("final norm published as '" + final_norm + "'");
}

// G5 holds exactly when a group's members share no namespace; the strict parser rejects exactly
// the colliding patterns, and key prefixes are unique exactly when nothing collides.
void check_namespace_collision(const Case& c) {
  const std::string text = pattern_of(c);
  const ParsedPattern p = patterns::parse(text, patterns::ParseOptions{.check_namespaces = false});
  bool any_collision = false;
  for (const Item& item : p.items()) {
    if (patterns::namespaces_disjoint(item) == namespaces_collide(item))
      fail("namespaces_disjoint('" + item.symbols + "') is wrong");
    any_collision = any_collision || namespaces_collide(item);
  }
  std::set<std::string> prefixes;
  bool unique = true;
  for (const auto& keys : patterns::layer_keys(p))
    for (const auto& prefix : keys.namespace_prefixes()) unique = prefixes.insert(prefix).second && unique;
  expect(unique == !any_collision, "key prefixes are unique iff no group collides: violated");
  bool strict_accepts = true;
  try {
    (void)patterns::parse(text);
  } catch (const PatternError& e) {
    if (patterns::rule_code(e.rule()) != "G5") fail("strict parse rejected with " + std::string(patterns::rule_code(e.rule())));
    strict_accepts = false;
  }
  if (strict_accepts == any_collision)
    fail(any_collision ? "a group with colliding namespaces was accepted" : "a collision-free pattern was rejected as G5");
}

// Reference section 1.3: segment k goes to pp rank k % pp, virtual stage k / pp; offsets are
// the layers of all earlier segments.
void check_stage_tiling(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const int pp = c.at("pp").get<int>(), vpp = c.at("vpp").get<int>();
  const auto stages = patterns::allocate_stages(p, gen::pipeline(pp, vpp));
  if (static_cast<int>(stages.size()) != pp * vpp) fail(std::to_string(stages.size()) + " stages for pp x vpp");
  int physical = 0, logical = 0;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const auto& s = stages[k];
    // An empty main pattern is one empty segment (reference 1.3: '' splits to ['']).
    const patterns::Segment seg = k < p.segments.size() ? p.segments[k] : patterns::Segment{};
    const std::string where = "stage " + std::to_string(k);
    if (s.pp_rank != static_cast<int>(k) % pp || s.vp_stage != static_cast<int>(k) / pp)
      fail(where + " placed on (" + std::to_string(s.pp_rank) + ", " + std::to_string(s.vp_stage) + ")");
    if (s.physical_offset != physical)
      fail(where + " physical offset " + std::to_string(s.physical_offset) + ", expected " + std::to_string(physical));
    if (s.logical_offset != logical)
      fail(where + " logical offset " + std::to_string(s.logical_offset) + ", expected " + std::to_string(logical));
    if (!(s.items == seg.items)) fail(where + " holds '" + show(s.items) + "', expected '" + show(seg.items) + "'");
    for (const Item& it : seg.items) physical += it.physical_count();
    logical += seg.logical_count();
  }
}

void check_stage_keys(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const int pp = c.at("pp").get<int>(), vpp = c.at("vpp").get<int>();
  const auto whole = patterns::layer_keys(p);
  std::size_t seen = 0;
  for (const auto& s : patterns::allocate_stages(p, gen::pipeline(pp, vpp)))
    for (const auto& k : patterns::stack_keys(s.items, s.physical_offset, s.logical_offset)) {
      if (seen >= whole.size()) fail("stages publish more keys than the model");
      if (k.physical != static_cast<int>(seen) || k.key_prefix != whole[seen].key_prefix ||
          k.namespaces != whole[seen].namespaces)
        fail("stage key of physical layer " + std::to_string(seen) + " is '" + k.key_prefix + "', the model's '" +
             whole[seen].key_prefix + "'");
      ++seen;
    }
  expect(seen == whole.size(), "stages publish fewer keys than the model");
}

// Reference section 2.5: the k-th '*' member and the k-th '-'/'E' member map to GPT layer k,
// 'M' is fresh, and every member's (logical index, namespace) resolves to its GPT layer.
void check_gpt_map(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  const patterns::GptMapping m = patterns::gpt_layer_map(p);
  std::map<int, int> attention, mlp;
  std::vector<int> fresh;
  const std::string flat = p.flattened_symbols();
  for (int i = 0; i < static_cast<int>(flat.size()); ++i) {
    const char s = flat[static_cast<std::size_t>(i)];
    if (s == '*') attention[i] = static_cast<int>(attention.size());
    else if (s == 'M') fresh.push_back(i);
    else mlp[i] = static_cast<int>(mlp.size());
  }
  expect(m.attention == attention, "attention members map to the wrong GPT layers");
  expect(m.mlp == mlp, "MLP members map to the wrong GPT layers");
  expect(m.fresh == fresh, "the wrong layers are initialised fresh");
  for (const auto& k : patterns::layer_keys(p)) {
    if (k.symbol == 'M') continue;
    const int gpt = k.symbol == '*' ? attention.at(k.physical) : mlp.at(k.physical);
    for (const auto& ns : k.namespaces) {
      const auto it = m.by_logical_namespace.find({k.logical, ns});
      if (it == m.by_logical_namespace.end() || it->second != gpt)
        fail("key (" + std::to_string(k.logical) + ", " + ns + ") does not resolve to GPT layer " + std::to_string(gpt));
    }
  }
}

void check_violation(const Case& c) {
  const std::string text = pattern_of(c);
  const std::string code = c.at("code").get<std::string>();
  const int position = c.at("position").get<int>();
  try {
    (void)patterns::parse(text);
  } catch (const PatternError& e) {
    const std::string got(patterns::rule_code(e.rule()));
    if (got != code) fail("rejected as " + got + ", expected " + code + ": " + e.what());
    if (position >= 0 && e.position() != position)
      fail("caret at " + std::to_string(e.position()) + ", expected " + std::to_string(position));
    expect(e.pattern() == text, "the error names another pattern");
    return;
  }
  fail("accepted a pattern that breaks " + code);
}

void check_pipeline_violation(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  patterns::PipelineConfig config = gen::pipeline(c.at("pp").get<int>());
  if (c.at("vpp").get<int>() > 0) config.vpp = c.at("vpp").get<int>();
  if (c.contains("first_stage_layers")) config.first_stage_layers = c["first_stage_layers"].get<int>();
  if (c.contains("last_stage_layers")) config.last_stage_layers = c["last_stage_layers"].get<int>();
  const std::string code = c.at("code").get<std::string>();
  try {
    if (c.contains("pp_rank"))
      (void)patterns::select_stage(p, config, c["pp_rank"].get<int>(), c["vp_stage"].get<int>());
    else
      (void)patterns::allocate_stages(p, config);
  } catch (const PatternError& e) {
    const std::string got(patterns::rule_code(e.rule()));
    if (got != code) fail("rejected as " + got + ", expected " + code + ": " + e.what());
    return;
  }
  fail("allocated a pipeline that breaks " + code);
}

// Reference 1.3, the legacy (pipe-less) split: with first/last stage counts, rank 0 holds `first`
// physical layers, the last rank `last`, the middle ranks equal shares after `first`; without
// them every rank N / pp. The generator built each stage's items itself (whole items only, so no
// group is cut), so the expected stages are its own, not a recomputation of the rule.
void check_legacy_split(const Case& c) {
  const ParsedPattern p = patterns::parse(pattern_of(c));
  patterns::PipelineConfig config;
  config.pp = c.at("pp").get<int>();
  if (c.contains("first_stage_layers")) config.first_stage_layers = c["first_stage_layers"].get<int>();
  if (c.contains("last_stage_layers")) config.last_stage_layers = c["last_stage_layers"].get<int>();
  const auto& stages_expected = c.at("stages");
  std::vector<patterns::StageSlice> stages;
  try {
    stages = patterns::allocate_stages(p, config);
  } catch (const PatternError& e) {
    fail(std::string("refused a valid legacy split: ") + e.what());
  }
  if (stages.size() != stages_expected.size())
    fail(std::to_string(stages.size()) + " stages, expected " + std::to_string(stages_expected.size()));
  int physical = 0, logical = 0;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const auto& s = stages[k];
    const std::string want = stages_expected[k].get<std::string>();
    const std::string where = "stage " + std::to_string(k);
    if (s.pp_rank != static_cast<int>(k) || s.vp_stage != 0)
      fail(where + " placed on (" + std::to_string(s.pp_rank) + ", " + std::to_string(s.vp_stage) + ")");
    if (show(s.items) != want) fail(where + " holds '" + show(s.items) + "', expected '" + want + "'");
    if (s.physical_offset != physical)
      fail(where + " physical offset " + std::to_string(s.physical_offset) + ", expected " + std::to_string(physical));
    if (s.logical_offset != logical)
      fail(where + " logical offset " + std::to_string(s.logical_offset) + ", expected " + std::to_string(logical));
    for (const Item& it : s.items) physical += it.physical_count();
    logical += static_cast<int>(s.items.size());
  }
  // One stage alone, as each rank asks for its own.
  const int last = static_cast<int>(stages.size()) - 1;
  const auto one = patterns::select_stage(p, config, last, std::nullopt);
  expect(show(one.items) == stages_expected[static_cast<std::size_t>(last)].get<std::string>() &&
             one.physical_offset == stages.back().physical_offset,
         "select_stage of the last rank differs from allocate_stages");
}

// ---- case sources ------------------------------------------------------------------------------

Case violation_case(const gen::Violation& v) { return {{"pattern", v.text}, {"code", v.code}, {"position", v.position}}; }

Case pipeline_violation_case(const gen::PipelineViolation& v) {
  Case c{{"pattern", v.text}, {"pp", v.config.pp}, {"vpp", v.config.vpp.value_or(0)}, {"code", v.code}};
  if (v.config.first_stage_layers) c["first_stage_layers"] = *v.config.first_stage_layers;
  if (v.config.last_stage_layers) c["last_stage_layers"] = *v.config.last_stage_layers;
  if (v.pp_rank) c["pp_rank"] = *v.pp_rank, c["vp_stage"] = v.vp_stage.value_or(0);
  return c;
}

using ViolationGen = rc::Gen<gen::Violation> (*)(rc::Gen<gen::PatternModel>);

std::function<CaseSource(const FuzzContext&)> violations(ViolationGen make, rc::Gen<gen::PatternModel> fallback) {
  return [make, fallback](const FuzzContext& ctx) -> CaseSource {
    const auto base = ctx.pattern ? base_model(ctx) : fallback;
    return {rc::gen::map(make(base), violation_case), ""};
  };
}

std::function<CaseSource(const FuzzContext&)> pipeline_violations(rc::Gen<gen::PipelineViolation> (*make)()) {
  return [make](const FuzzContext& ctx) -> CaseSource {
    if (ctx.pattern) return {std::nullopt, "generates its own pattern and pipeline layout"};
    return {rc::gen::map(make(), pipeline_violation_case), ""};
  };
}

// Pipes and a pipeline layout that fits them: pp * vpp segments.
CaseSource piped_cases(const FuzzContext& ctx) {
  if (ctx.pattern) {
    const ParsedPattern p = patterns::parse(*ctx.pattern);
    const int segments = p.segment_count();
    if (segments == 0) return {std::nullopt, "the pattern has no main part"};
    std::vector<int> pps;
    for (int d = 1; d <= segments; ++d)
      if (segments % d == 0) pps.push_back(d);
    const std::string text = p.text;
    return {rc::gen::map(rc::gen::elementOf(pps),
                         [text, segments](int pp) { return Case{{"pattern", text}, {"pp", pp}, {"vpp", segments / pp}}; }),
            ""};
  }
  return {rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange(1, 4), rc::gen::inRange(1, 4)),
                          [](const std::tuple<int, int>& t) {
                            const auto [pp, vpp] = t;
                            return rc::gen::map(gen::piped_pattern(pp, vpp), [pp, vpp](const gen::PatternModel& m) {
                              return Case{{"pattern", m.text()}, {"pp", pp}, {"vpp", vpp}};
                            });
                          }),
          ""};
}

// Valid legacy splits: pp 2-5; first and last stage counts each set or not; every stage built
// from whole items (single layers of M * -, or a [mixer -] group) that fill its share exactly.
CaseSource legacy_split_cases(const FuzzContext& ctx) {
  if (ctx.pattern) return {std::nullopt, "legacy splits are generated with their stage sizes"};
  return {rc::gen::exec([] {
            const int pp = *rc::gen::inRange(2, 6);
            const bool has_first = *rc::gen::arbitrary<bool>(), has_last = *rc::gen::arbitrary<bool>();
            const int first = has_first ? *rc::gen::inRange(1, 6) : 0, last = has_last ? *rc::gen::inRange(1, 6) : 0;
            const int middle_stages = pp - (has_first ? 1 : 0) - (has_last ? 1 : 0);
            const int share = *rc::gen::inRange(middle_stages > 0 ? 1 : 0, 5);
            std::vector<int> sizes;
            for (int r = 0; r < pp; ++r)
              sizes.push_back(r == 0 && has_first ? first : r == pp - 1 && has_last ? last : share);
            if (!has_first && !has_last) {
              // Even split: every rank N / pp.
              for (int& z : sizes) z = std::max(share, 1);
            }
            Case c{{"pp", pp}};
            if (has_first) c["first_stage_layers"] = first;
            if (has_last) c["last_stage_layers"] = last;
            std::string text;
            nlohmann::json stages = nlohmann::json::array();
            for (int size : sizes) {
              std::string stage;
              for (int left = size; left > 0;) {
                // A group holds one mixer and one MLP (two of a namespace collide, rule G5).
                if (left >= 2 && *rc::gen::inRange(0, 3) == 0) {
                  stage += std::string("[") + *rc::gen::element('M', '*') + "-]";
                  left -= 2;
                } else {
                  stage += *rc::gen::element('M', '*', '-');
                  left -= 1;
                }
              }
              stages.push_back(stage);
              text += stage;
            }
            RC_PRE(!text.empty());
            c["pattern"] = text;
            c["stages"] = stages;
            return c;
          }),
          ""};
}

CaseSource gpt_cases(const FuzzContext& ctx) {
  if (ctx.pattern) {
    const ParsedPattern p = patterns::parse(*ctx.pattern);
    const std::string flat = p.flattened_symbols();
    const auto count = [&](char s) { return std::count(flat.begin(), flat.end(), s); };
    const bool ok = p.mtp_depths == 0 && flat.find_first_not_of("*-EM") == std::string::npos &&
                    !(count('-') > 0 && count('E') > 0) && count('*') > 0 && count('*') == count('-') + count('E');
    if (!ok) return {std::nullopt, "the pattern cannot be mapped to a GPT checkpoint (rule C1)"};
    return {constant(Case{{"pattern", p.text}}), ""};
  }
  return {rc::gen::map(gen::gpt_compatible_pattern(), [](const std::string& s) { return Case{{"pattern", s}}; }), ""};
}

CaseSource loose_cases(const FuzzContext& ctx) {
  if (ctx.pattern) return {constant(Case{{"pattern", *ctx.pattern}}), ""};
  return {rc::gen::map(gen::loosely_grouped_pattern(), [](const gen::PatternModel& m) { return Case{{"pattern", m.text()}}; }),
          ""};
}

Property make(std::string name, std::string summary, std::function<CaseSource(const FuzzContext&)> cases,
              std::function<void(const Case&)> check) {
  return Property{std::move(name), "pattern", std::move(summary), std::move(cases), std::move(check)};
}

}  // namespace

void add_pattern_properties(std::vector<Property>& out) {
  out.push_back(make("pattern.parse_structure", "valid patterns parse to exactly the generated segments, items and MTP",
                     valid_cases, check_parse_structure));
  out.push_back(make("pattern.roundtrip", "parse(to_string(p)) == p and printing is stable", valid_cases, check_roundtrip));
  out.push_back(make("pattern.counts", "physical, logical and per-symbol counts match the generated model", valid_cases,
                     check_counts));
  out.push_back(make("pattern.flatten", "flatten keeps the physical order and keys layers by physical index",
                     valid_cases, check_flatten));
  out.push_back(make("pattern.logical_keys", "group members publish decoder.layers.<logical>.<own namespaces>",
                     valid_cases, check_logical_keys));
  out.push_back(make("pattern.namespace_collision",
                     "G5 rejects exactly the groups whose members share a namespace (reference 1.1 table)",
                     loose_cases, check_namespace_collision));
  out.push_back(make("pattern.stage_tiling", "segment k -> (k % pp, k / pp) with offsets of all earlier segments",
                     piped_cases, check_stage_tiling));
  out.push_back(make("pattern.legacy_split",
                     "valid pipe-less splits (first/last stage counts set or not) allocate and tile the layers in order",
                     legacy_split_cases, check_legacy_split));
  out.push_back(make("pattern.stage_keys", "each stage's keys are the whole model's keys for its layers", piped_cases,
                     check_stage_keys));
  out.push_back(make("pattern.gpt_map", "the k-th '*' and k-th MLP member map to GPT layer k", gpt_cases,
                     check_gpt_map));
  const auto any = gen::valid_pattern();
  const auto plain = gen::pattern_in(gen::plain_world(), gen::item(gen::plain_world()), 1, 3, true);
  const auto no_mtp = rc::gen::mapcat(gen::world(), [](const gen::World& w) { return gen::pattern_in(w, gen::item(w), 1, 3, false); });
  const auto rule = [&](const char* code, const char* what, ViolationGen g, rc::Gen<gen::PatternModel> base) {
    out.push_back(make(std::string("pattern.rule.") + code, what, violations(g, base), check_violation));
  };
  rule("R1", "a foreign character is rejected as R1 at that character",
       [](rc::Gen<gen::PatternModel> b) { return gen::r1_violation(b); }, any);
  rule("R2", "'*' with an MLA-family symbol is rejected as R2 at the first conflict",
       [](rc::Gen<gen::PatternModel> b) { return gen::r2_violation(b); }, plain);
  rule("R3", "differing MTP parts are rejected as R3 at the first differing part",
       [](rc::Gen<gen::PatternModel> b) { return gen::r3_violation(b); }, any);
  rule("R4", "a pipe inside MTP parts is rejected as R4 at the pipe",
       [](rc::Gen<gen::PatternModel> b) { return gen::r4_violation(b); }, any);
  const auto pipeline_rule = [&](const char* code, const char* what, rc::Gen<gen::PipelineViolation> (*g)()) {
    out.push_back(make(std::string("pattern.rule.") + code, what, pipeline_violations(g), check_pipeline_violation));
  };
  pipeline_rule("R5", "pipes with first/last stage layer counts are rejected as R5", gen::r5_violation);
  pipeline_rule("R6", "a virtual stage of a pipe-less pattern on pp > 1 is rejected as R6", gen::r6_violation);
  pipeline_rule("R7", "a legacy split with N % pp != 0 is rejected as R7", gen::r7_violation);
  pipeline_rule("R8", "a segment count pp does not divide is rejected as R8", gen::r8_violation);
  rule("G1", "unmatched, stray, empty and nested brackets are rejected as G1",
       [](rc::Gen<gen::PatternModel> b) { return gen::g1_violation(b); }, any);
  rule("G2", "'E' before the end of its group is rejected as G2 at that 'E'",
       [](rc::Gen<gen::PatternModel> b) { return gen::g2_violation(b); }, any);
  rule("G3", "a group inside MTP parts is rejected as G3 at its bracket",
       [](rc::Gen<gen::PatternModel> b) { return gen::g3_violation_on(b); }, no_mtp);
  pipeline_rule("G4", "a legacy split boundary inside a group is rejected as G4", gen::g4_violation);
  rule("G5", "a group with two owners of one namespace is rejected as G5 at the second",
       [](rc::Gen<gen::PatternModel> b) { return gen::g5_violation(b); }, any);
}

}  // namespace ht::verify::detail
