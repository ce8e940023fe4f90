// rapidcheck properties of parse() and to_string(): generated valid patterns are accepted with
// exactly the generated structure, printing round-trips, and every single-rule violation comes
// back with that rule and its caret position. Generators: ht/verify/pattern_gen.hpp.
#include <rapidcheck/catch.h>

#include "ht/verify/pattern_gen.hpp"
#include "pattern_test_support.hpp"

using namespace ht::patterns;
namespace pg = ht::verify::gen;

namespace {

void assert_rejected(const pg::Violation& v) {
  try {
    (void)parse(v.text);
  } catch (const PatternError& e) {
    RC_ASSERT(std::string(rule_code(e.rule())) == v.code);
    if (v.position >= 0) RC_ASSERT(e.position() == v.position);
    RC_ASSERT(e.pattern() == v.text);
    return;
  }
  RC_FAIL("accepted a pattern that breaks " + v.code);
}

}  // namespace

TEST_CASE("generated valid patterns are accepted and parse to the generated structure", "[patterns][property]") {
  rc::prop("valid patterns parse", [] {
    const pg::PatternModel m = *pg::valid_pattern();
    const ParsedPattern p = parse(m.text());
    RC_ASSERT(p.text == m.text());
    RC_ASSERT(p.main == m.main_text());
    if (m.main_text().empty()) {
      RC_ASSERT(p.segments.empty());
    } else {
      RC_ASSERT(p.segment_count() == static_cast<int>(m.segments.size()));
      for (std::size_t s = 0; s < m.segments.size(); ++s) RC_ASSERT(p.segments[s].items == m.segments[s]);
    }
    RC_ASSERT(p.mtp_depths == m.expected_depth());
    RC_ASSERT(p.mtp == (m.expected_depth() > 0 ? m.mtp : std::string()));
  });
}

TEST_CASE("printing a parsed pattern and parsing it again gives the same pattern", "[patterns][property]") {
  rc::prop("parse(to_string(p)) == p", [] {
    const ParsedPattern p = parse((*pg::valid_pattern()).text());
    const std::string printed = to_string(p);
    const ParsedPattern again = parse(printed);
    RC_ASSERT(again == p);
    RC_ASSERT(to_string(again) == printed);
  });
}

TEST_CASE("a foreign character anywhere is rejected as R1 at that character", "[patterns][property][R1]") {
  rc::prop("R1", [] { assert_rejected(*pg::r1_violation()); });
}

TEST_CASE("'*' together with an MLA-family symbol is rejected as R2", "[patterns][property][R2]") {
  rc::prop("R2", [] { assert_rejected(*pg::r2_violation()); });
}

TEST_CASE("MTP parts that differ are rejected as R3 at the first differing part", "[patterns][property][R3]") {
  rc::prop("R3", [] { assert_rejected(*pg::r3_violation()); });
}

TEST_CASE("a pipe in identical MTP parts is rejected as R4 at the pipe", "[patterns][property][R4]") {
  rc::prop("R4", [] { assert_rejected(*pg::r4_violation()); });
}

TEST_CASE("unmatched, stray, empty and nested brackets are rejected as G1", "[patterns][property][G1]") {
  rc::prop("G1", [] { assert_rejected(*pg::g1_violation()); });
}

TEST_CASE("an 'E' before the end of its group is rejected as G2 at that 'E'", "[patterns][property][G2]") {
  rc::prop("G2", [] { assert_rejected(*pg::g2_violation()); });
}

TEST_CASE("a group inside MTP parts is rejected as G3 at its opening bracket", "[patterns][property][G3]") {
  rc::prop("G3", [] { assert_rejected(*pg::g3_violation()); });
}

TEST_CASE("a group with two owners of one namespace is rejected as G5 at the second", "[patterns][property][G5]") {
  rc::prop("G5", [] { assert_rejected(*pg::g5_violation()); });
}
