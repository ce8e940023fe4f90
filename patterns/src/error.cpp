// Rule codes, titles and the caret rendering of pattern errors.
#include "ht/patterns/error.hpp"

#include <array>
#include <utility>

namespace ht::patterns {
namespace {

struct RuleText {
  std::string_view code;
  std::string_view title;
};

RuleText text(Rule rule) {
  switch (rule) {
    case Rule::R1_InvalidSymbol: return {"R1", "invalid layer symbol"};
    case Rule::R2_AttentionExclusion: return {"R2", "attention mixed with MLA-family attention"};
    case Rule::R3_MtpNotIdentical: return {"R3", "MTP depth patterns differ"};
    case Rule::R4_PipeInMtp: return {"R4", "pipe in MTP pattern"};
    case Rule::R5_PipesWithStageLayers: return {"R5", "pipes with first/last stage layer counts"};
    case Rule::R6_VppWithoutPipes: return {"R6", "virtual pipeline without pipes"};
    case Rule::R7_UnevenSplit: return {"R7", "layers do not divide over pipeline stages"};
    case Rule::R8_SegmentCount: return {"R8", "pipeline segments do not match the pipeline"};
    case Rule::G1_Bracket: return {"G1", "malformed layer group"};
    case Rule::G2_MoeNotLast: return {"G2", "MoE not last in its group"};
    case Rule::G3_BracketInMtp: return {"G3", "layer group in MTP pattern"};
    case Rule::G4_SplitsGroup: return {"G4", "pipeline split inside a layer group"};
    case Rule::G5_NamespaceCollision: return {"G5", "colliding checkpoint namespaces in a group"};
    case Rule::GptImport: return {"C1", "pattern cannot import a GPT checkpoint"};
    case Rule::BadArgument: return {"A0", "bad argument"};
  }
  return {"??", "unknown rule"};
}

std::string compose(Rule rule, const std::string& message, const std::string& pattern, int position) {
  std::string out = std::string(text(rule).code) + " " + message + " (pattern '" + pattern + "'";
  if (position >= 0) out += ", position " + std::to_string(position);
  return out + ")";
}

}  // namespace

std::string_view rule_code(Rule rule) { return text(rule).code; }
std::string_view rule_title(Rule rule) { return text(rule).title; }

PatternError::PatternError(Rule rule, std::string message, std::string pattern, int position)
    : std::runtime_error(compose(rule, message, pattern, position)),
      rule_(rule),
      pattern_(std::move(pattern)),
      position_(position) {}

std::string PatternError::caret_line() const {
  if (position_ < 0 || position_ > static_cast<int>(pattern_.size())) return {};
  return "  " + pattern_ + "\n  " + std::string(static_cast<std::size_t>(position_), ' ') + "^\n";
}

}  // namespace ht::patterns
