// The parsed form of a hybrid layer pattern `<main>[/<mtp>/<mtp>...]` (reference sections 1.2,
// 2.1, 2.2): pipeline segments of items, where an item is one logical layer made of one symbol
// or of a bracketed group of physical layers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ht/patterns/error.hpp"

namespace ht::patterns {

// One logical layer: a single symbol ("M") or a group ("M*E", grouped = true).
struct Item {
  std::string symbols;
  bool grouped = false;
  int position = 0;  // offset of the item's first character ('[' for groups) in the full pattern

  int physical_count() const { return static_cast<int>(symbols.size()); }
  char terminal() const { return symbols.back(); }
  bool operator==(const Item& o) const { return symbols == o.symbols && grouped == o.grouped; }
};

struct Segment {
  std::vector<Item> items;
  int position = 0;  // offset of the segment's first character in the full pattern
  int physical_count() const;
  int logical_count() const { return static_cast<int>(items.size()); }
};

// Options that change which rules apply. Defaults follow the latest Megatron PR state.
struct ParseOptions {
  bool check_namespaces = true;  // G5: reject groups whose members share a checkpoint namespace
};

struct ParsedPattern {
  std::string text;                 // the full pattern as given
  std::string main;                 // main part ("" when absent)
  std::vector<Segment> segments;    // main split on '|' ({} when main is empty)
  std::string mtp;                  // one MTP depth pattern ("" when none)
  std::vector<Item> mtp_items;      // MTP pattern as items (never grouped)
  int mtp_depths = 0;

  bool has_main() const { return !main.empty(); }
  bool has_groups() const;          // main contains '['
  int physical_count() const;       // main layers, brackets and pipes removed
  int logical_count() const;        // main items
  int segment_count() const { return static_cast<int>(segments.size()); }
  // All main items in order, pipes dropped.
  std::vector<Item> items() const;
  // Main symbols in physical order ("M*EM*E" for "[M*E]|[M*E]").
  std::string flattened_symbols() const;
  // Whether the main pattern or an MTP depth holds a MoE ('E') layer.
  bool has_moe() const;
};

// Parses and validates a full pattern; throws PatternError.
ParsedPattern parse(std::string_view pattern, const ParseOptions& options = {});
// Validates one pipe-free segment (Megatron's validate_segment_layers); throws PatternError.
std::vector<Item> parse_segment(std::string_view segment, const ParseOptions& options = {});

// Canonical text of a parsed pattern; parse(to_string(p)) == p.
std::string to_string(const ParsedPattern& parsed);
// The same physical layers with every group dissolved ("M[*E]-" -> "M*E-"); MTP kept.
ParsedPattern flatten(const ParsedPattern& parsed);

// Per-symbol counts over all symbols of the table; MTP symbols count once per depth.
std::map<char, int> layer_counts(const ParsedPattern& parsed);
// For each symbol: global physical index -> index among layers of that symbol (main only).
std::map<char, std::map<int, int>> layer_maps(const ParsedPattern& parsed);
// Legacy ratio -> pattern conversion (attention evenly spaced, then '-' replaces Mamba evenly).
std::string pattern_from_ratios(int num_layers, double attention_ratio, double mlp_ratio = 0.0);

bool operator==(const Segment& a, const Segment& b);
bool operator==(const ParsedPattern& a, const ParsedPattern& b);

}  // namespace ht::patterns
