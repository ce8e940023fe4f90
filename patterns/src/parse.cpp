// Parsing and validation of `<main>[/<mtp>...]` (reference sections 1.2, 2.1, 2.2, rules R1-R4,
// G1-G3, G5). Validation order: every character first (R1, R4), then group structure (G1, G2,
// G5), then the attention exclusion (R2); MTP depths are compared before their symbols are
// checked. The set of accepted patterns matches Megatron-LM's, but the order is ours: on an input
// with two faults the rule reported can differ from Megatron's (`M[]X` reports R1 here; Megatron
// reports the empty group). G5 is our inference of the rule (reference section 4), not Megatron
// code.
#include <algorithm>
#include <cmath>
#include <set>

#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/symbols.hpp"

namespace ht::patterns {
namespace {

std::string quoted(char c) { return std::string("'") + c + "'"; }

// Everything the validators need to raise an error that points into the full pattern.
struct Context {
  const std::string& full;
  std::string_view name;  // "main", "MTP", "segment"
  int base;               // offset of the validated text inside `full`
  [[noreturn]] void fail(Rule rule, const std::string& message, int local_pos) const {
    throw PatternError(rule, "in " + std::string(name) + " pattern: " + message, full,
                       local_pos < 0 ? -1 : base + local_pos);
  }
};

// Pass 1: every character is a layer symbol or allowed structure (R1, R4).
void check_characters(std::string_view text, bool allow_pipe, const Context& ctx) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (is_layer_symbol(c) || c == kGroupStart || c == kGroupEnd) continue;
    if (c == kPipe && allow_pipe) continue;
    if (c == kPipe)
      ctx.fail(Rule::R4_PipeInMtp, "'|' is not allowed here: pipeline segments exist only in the main pattern",
               static_cast<int>(i));
    ctx.fail(Rule::R1_InvalidSymbol,
             quoted(c) + " is not a layer symbol (valid: " + std::string(valid_symbols_text()) + ")",
             static_cast<int>(i));
  }
}

// R2 over the flattened symbols of one pattern part.
void check_attention_exclusion(std::string_view text, const Context& ctx) {
  bool plain = false, mla = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const SymbolInfo* s = find_symbol(text[i]);
    if (!s || s->kind != LayerKind::Attention) continue;
    bool was_conflict = plain && mla;
    (s->mla_family ? mla : plain) = true;
    if (plain && mla && !was_conflict)
      ctx.fail(Rule::R2_AttentionExclusion,
               quoted(text[i]) + " cannot share a model with " +
                   (s->mla_family ? "'*' attention" : "MLA-family attention (D + C H W)"),
               static_cast<int>(i));
  }
}

// Pass 2: one pipe-free segment into items (G1, G2, G5). `text` is the segment, `offset` its
// position inside the validated part.
std::vector<Item> parse_items(std::string_view text, int offset, const Context& ctx, const ParseOptions& options) {
  std::vector<Item> items;
  std::size_t i = 0;
  while (i < text.size()) {
    const int pos = offset + static_cast<int>(i);
    char c = text[i];
    if (c == kGroupEnd) ctx.fail(Rule::G1_Bracket, "']' closes a layer group that was never opened", pos);
    if (c != kGroupStart) {
      items.push_back(Item{std::string(1, c), false, ctx.base + pos});
      ++i;
      continue;
    }
    std::size_t close = text.find(kGroupEnd, i + 1);
    if (close == std::string_view::npos)
      ctx.fail(Rule::G1_Bracket, "'[' opens a layer group that is never closed by ']'", pos);
    std::string_view body = text.substr(i + 1, close - i - 1);
    if (body.empty()) ctx.fail(Rule::G1_Bracket, "a layer group must contain at least one layer", pos);
    if (auto nested = body.find(kGroupStart); nested != std::string_view::npos)
      ctx.fail(Rule::G1_Bracket, "layer groups cannot be nested", pos + 1 + static_cast<int>(nested));
    for (std::size_t k = 0; k + 1 < body.size(); ++k)
      if (body[k] == 'E')
        ctx.fail(Rule::G2_MoeNotLast, "the MoE layer 'E' must be the last layer of its group",
                 pos + 1 + static_cast<int>(k));
    Item item{std::string(body), true, ctx.base + pos};
    if (options.check_namespaces && !namespaces_disjoint(item)) {
      // Point at the first member whose namespace an earlier member already owns.
      std::set<std::string_view> owned;
      for (std::size_t k = 0; k < body.size(); ++k)
        for (std::string_view ns : find_symbol(body[k])->namespaces) {
          if (ns.empty()) continue;
          if (!owned.insert(ns).second)
            ctx.fail(Rule::G5_NamespaceCollision,
                     "group members share the checkpoint namespace '" + std::string(ns) +
                         "' (each member of a group publishes under the same decoder.layers.<logical> key)",
                     pos + 1 + static_cast<int>(k));
        }
    }
    items.push_back(std::move(item));
    i = close + 1;
  }
  return items;
}

std::string flatten_text(const std::vector<Item>& items) {
  std::string out;
  for (const auto& it : items) out += it.symbols;
  return out;
}

std::string item_text(const std::vector<Item>& items) {
  std::string out;
  for (const auto& it : items) out += it.grouped ? "[" + it.symbols + "]" : it.symbols;
  return out;
}

// The main pattern: characters, segments, attention exclusion.
std::vector<Segment> parse_main(const std::string& full, std::string_view main, const ParseOptions& options) {
  Context ctx{full, "main", 0};
  check_characters(main, true, ctx);
  std::vector<Segment> segments;
  std::size_t start = 0;
  while (true) {
    std::size_t bar = main.find(kPipe, start);
    std::string_view seg = main.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    segments.push_back(Segment{parse_items(seg, static_cast<int>(start), ctx, options), static_cast<int>(start)});
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  std::string flat;
  for (std::size_t i = 0; i < main.size(); ++i)
    flat += is_layer_symbol(main[i]) ? main[i] : ' ';  // keep positions for R2
  check_attention_exclusion(flat, ctx);
  return segments;
}

}  // namespace

int Segment::physical_count() const {
  int n = 0;
  for (const auto& it : items) n += it.physical_count();
  return n;
}

bool ParsedPattern::has_groups() const { return main.find(kGroupStart) != std::string::npos; }

int ParsedPattern::physical_count() const {
  int n = 0;
  for (const auto& s : segments) n += s.physical_count();
  return n;
}

int ParsedPattern::logical_count() const {
  int n = 0;
  for (const auto& s : segments) n += s.logical_count();
  return n;
}

std::vector<Item> ParsedPattern::items() const {
  std::vector<Item> out;
  for (const auto& s : segments) out.insert(out.end(), s.items.begin(), s.items.end());
  return out;
}

std::string ParsedPattern::flattened_symbols() const { return flatten_text(items()); }

bool ParsedPattern::has_moe() const {
  return main.find('E') != std::string::npos || (mtp_depths > 0 && mtp.find('E') != std::string::npos);
}

ParsedPattern parse(std::string_view pattern, const ParseOptions& options) {
  ParsedPattern out;
  out.text = std::string(pattern);
  const std::string& full = out.text;

  std::vector<std::string_view> parts;
  std::vector<int> part_pos;
  std::size_t start = 0;
  while (true) {
    std::size_t slash = pattern.find(kMtpSeparator, start);
    parts.push_back(pattern.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    part_pos.push_back(static_cast<int>(start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }

  out.main = std::string(parts[0]);
  if (!out.main.empty()) out.segments = parse_main(full, parts[0], options);
  if (parts.size() == 1) return out;

  bool all_empty = std::all_of(parts.begin() + 1, parts.end(), [](auto p) { return p.empty(); });
  if (all_empty) return out;  // "M*M*/" has no MTP depth

  for (std::size_t i = 2; i < parts.size(); ++i)
    if (parts[i] != parts[1])
      throw PatternError(Rule::R3_MtpNotIdentical,
                         "every MTP depth pattern must be identical: depth 1 is '" + std::string(parts[1]) +
                             "' but depth " + std::to_string(i) + " is '" + std::string(parts[i]) + "'",
                         full, part_pos[i]);

  Context ctx{full, "MTP", part_pos[1]};
  check_characters(parts[1], false, ctx);
  std::vector<Item> items = parse_items(parts[1], 0, ctx, ParseOptions{false});
  for (std::size_t i = 0; i < parts[1].size(); ++i)
    if (parts[1][i] == kGroupStart || parts[1][i] == kGroupEnd)
      ctx.fail(Rule::G3_BracketInMtp,
               "layer groups '[...]' are not allowed: each MTP depth is already one fused unit",
               static_cast<int>(i));
  check_attention_exclusion(parts[1], ctx);
  out.mtp = std::string(parts[1]);
  out.mtp_items = std::move(items);
  out.mtp_depths = static_cast<int>(parts.size()) - 1;
  return out;
}

std::vector<Item> parse_segment(std::string_view segment, const ParseOptions& options) {
  std::string full(segment);
  Context ctx{full, "segment", 0};
  for (std::size_t i = 0; i < segment.size(); ++i) {
    char c = segment[i];
    if (c == kPipe || c == kMtpSeparator)
      ctx.fail(Rule::R1_InvalidSymbol, quoted(c) + " is not allowed inside one pipeline segment", static_cast<int>(i));
  }
  check_characters(segment, false, ctx);
  auto items = parse_items(segment, 0, ctx, options);
  check_attention_exclusion(segment, ctx);
  return items;
}

std::string to_string(const ParsedPattern& parsed) {
  std::string out;
  for (std::size_t i = 0; i < parsed.segments.size(); ++i) {
    if (i) out += kPipe;
    out += item_text(parsed.segments[i].items);
  }
  for (int d = 0; d < parsed.mtp_depths; ++d) out += kMtpSeparator + parsed.mtp;
  return out;
}

ParsedPattern flatten(const ParsedPattern& parsed) {
  std::string text;
  for (std::size_t i = 0; i < parsed.segments.size(); ++i) {
    if (i) text += kPipe;
    text += flatten_text(parsed.segments[i].items);
  }
  for (int d = 0; d < parsed.mtp_depths; ++d) text += kMtpSeparator + parsed.mtp;
  return parse(text);
}

std::map<char, int> layer_counts(const ParsedPattern& parsed) {
  std::map<char, int> counts;
  for (const auto& s : symbol_table()) counts[s.symbol] = 0;
  for (char c : parsed.flattened_symbols()) ++counts[c];
  for (const auto& it : parsed.mtp_items)
    for (char c : it.symbols) counts[c] += parsed.mtp_depths;
  return counts;
}

std::map<char, std::map<int, int>> layer_maps(const ParsedPattern& parsed) {
  std::map<char, std::map<int, int>> maps;
  for (const auto& s : symbol_table()) maps[s.symbol];
  std::string flat = parsed.flattened_symbols();
  for (std::size_t i = 0; i < flat.size(); ++i) {
    auto& m = maps[flat[i]];
    m[static_cast<int>(i)] = static_cast<int>(m.size());
  }
  return maps;
}

std::string pattern_from_ratios(int num_layers, double attention_ratio, double mlp_ratio) {
  const std::string none;
  if (num_layers < 0) throw PatternError(Rule::BadArgument, "num_layers must be >= 0", none, -1);
  if (!(attention_ratio >= 0 && attention_ratio <= 1 && mlp_ratio >= 0 && mlp_ratio <= 1 &&
        attention_ratio + mlp_ratio <= 1.0 + 1e-12))
    throw PatternError(Rule::BadArgument, "ratios must lie in [0, 1] and sum to at most 1", none, -1);
  // Python's round() (ties to even), which std::nearbyint gives in the default rounding mode.
  const int n_attn = static_cast<int>(std::nearbyint(num_layers * attention_ratio));
  const int n_mlp = static_cast<int>(std::nearbyint(num_layers * mlp_ratio));
  std::string out(static_cast<std::size_t>(num_layers), 'M');
  // Spread k marks evenly over the n slots that `eligible` selects: slot j (0-based among the
  // eligible ones) is marked when the running share floor((j+1)*k/n) steps up.
  auto spread = [&out](int k, char mark, auto eligible) {
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < out.size(); ++i)
      if (eligible(out[i])) slots.push_back(i);
    const long n = static_cast<long>(slots.size());
    if (k <= 0 || n == 0) return;
    for (long j = 0; j < n; ++j)
      if ((j + 1) * k / n > j * k / n) out[slots[static_cast<std::size_t>(j)]] = mark;
  };
  spread(n_attn, '*', [](char) { return true; });
  spread(std::min(n_mlp, num_layers - n_attn), '-', [](char c) { return c == 'M'; });
  return out;
}

bool operator==(const Segment& a, const Segment& b) { return a.items == b.items; }

bool operator==(const ParsedPattern& a, const ParsedPattern& b) {
  return a.main == b.main && a.segments == b.segments && a.mtp == b.mtp && a.mtp_items == b.mtp_items &&
         a.mtp_depths == b.mtp_depths;
}

}  // namespace ht::patterns
