// Typed errors of the pattern language. Every error names the rule it enforces (reference
// section 4 numbering), the offending character position in the full pattern (or -1 when the
// error is about the pattern as a whole) and the pattern itself.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ht::patterns {

enum class Rule {
  R1_InvalidSymbol,         // a character that is not a layer symbol (main, MTP or segment)
  R2_AttentionExclusion,    // '*' together with D/+/C/H/W
  R3_MtpNotIdentical,       // MTP depth patterns differ
  R4_PipeInMtp,             // '|' inside an MTP depth pattern
  R5_PipesWithStageLayers,  // pipes together with first/last stage layer counts
  R6_VppWithoutPipes,       // virtual pipeline without pipe separators
  R7_UnevenSplit,           // legacy split does not divide evenly
  R8_SegmentCount,          // segments not divisible by pp, or segment index out of range
  G1_Bracket,               // unmatched '[', stray ']', empty group, nested group
  G2_MoeNotLast,            // 'E' not last inside a group
  G3_BracketInMtp,          // '[' or ']' in an MTP pattern
  G4_SplitsGroup,           // pipeline cut (or offset) inside a group
  G5_NamespaceCollision,    // group members share a checkpoint namespace
  GptImport,                // C1: pattern cannot be mapped to a GPT checkpoint
  BadArgument,              // a numeric argument out of range (pp < 1, ratios, ...)
};

// Short stable code, e.g. "R1", "G5", used in messages and JSON.
std::string_view rule_code(Rule rule);
// One-line human description, e.g. "invalid layer symbol".
std::string_view rule_title(Rule rule);

class PatternError : public std::runtime_error {
 public:
  PatternError(Rule rule, std::string message, std::string pattern, int position);
  Rule rule() const noexcept { return rule_; }
  // 0-based offset into pattern(), or -1 when no single character is to blame.
  int position() const noexcept { return position_; }
  const std::string& pattern() const noexcept { return pattern_; }
  // "  <pattern>\n  <spaces>^" or empty when position() < 0.
  std::string caret_line() const;

 private:
  Rule rule_;
  std::string pattern_;
  int position_;
};

}  // namespace ht::patterns
