// Specification tests for parsing the full pattern `<main>[/<mtp>/<mtp>...]` (reference sections
// 1.2 and 4: R1-R4): how the text splits into main, pipe segments and MTP depths, and which
// malformed patterns are rejected with which rule and caret position.
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::check_parse_rejects;
using ht::patterns::test::error_of;
using ht::patterns::test::items_of;

TEST_CASE("a pattern without '/' is all main pattern, with one segment and no MTP", "[patterns][parse]") {
  const ParsedPattern p = parse("M*-");
  CHECK(p.text == "M*-");
  CHECK(p.main == "M*-");
  CHECK(p.has_main());
  REQUIRE(p.segment_count() == 1);
  CHECK(p.segments[0].items == items_of({"M", "*", "-"}));
  CHECK(p.segments[0].position == 0);
  CHECK(p.mtp.empty());
  CHECK(p.mtp_items.empty());
  CHECK(p.mtp_depths == 0);
}

TEST_CASE("'M*M*/' has only empty MTP parts and therefore MTP depth 0", "[patterns][parse]") {
  const ParsedPattern p = parse("M*M*/");
  CHECK(p.main == "M*M*");
  CHECK(p.mtp.empty());
  CHECK(p.mtp_depths == 0);
  CHECK(parse("M*M*//").mtp_depths == 0);
}

TEST_CASE("the empty pattern and a lone '/' have neither main layers nor MTP", "[patterns][parse]") {
  for (std::string_view text : {"", "/", "//"}) {
    INFO("pattern: '" << text << "'");
    const ParsedPattern p = parse(text);
    CHECK_FALSE(p.has_main());
    CHECK(p.segments.empty());
    CHECK(p.physical_count() == 0);
    CHECK(p.mtp_depths == 0);
  }
}

TEST_CASE("an empty main part is legal in front of MTP depths: '/*E' has MTP depth 1", "[patterns][parse]") {
  const ParsedPattern p = parse("/*E");
  CHECK_FALSE(p.has_main());
  CHECK(p.segments.empty());
  CHECK(p.mtp == "*E");
  CHECK(p.mtp_depths == 1);
}

TEST_CASE("the MTP depth is the number of identical '/' parts: 'M*/*E/*E' has depth 2", "[patterns][parse]") {
  const ParsedPattern p = parse("M*/*E/*E");
  CHECK(p.main == "M*");
  CHECK(p.mtp == "*E");
  CHECK(p.mtp_depths == 2);
  REQUIRE(p.mtp_items == items_of({"*", "E"}));
  // Item positions point into the full pattern: the first MTP part starts at 3.
  CHECK(p.mtp_items[0].position == 3);
  CHECK(p.mtp_items[1].position == 4);
}

TEST_CASE("pipes split the main pattern into segments with positions in the full text", "[patterns][parse]") {
  const ParsedPattern p = parse("MM|M*|M-|ME");
  REQUIRE(p.segment_count() == 4);
  CHECK(p.segments[0].position == 0);
  CHECK(p.segments[1].position == 3);
  CHECK(p.segments[2].position == 6);
  CHECK(p.segments[3].position == 9);
  CHECK(p.segments[3].items == items_of({"M", "E"}));
  CHECK(p.segments[3].items[1].position == 10);
}

TEST_CASE("'||M' has one physical layer in three segments, two of them empty", "[patterns][parse]") {
  const ParsedPattern p = parse("||M");
  CHECK(p.physical_count() == 1);
  CHECK(p.logical_count() == 1);
  REQUIRE(p.segment_count() == 3);
  CHECK(p.segments[0].items.empty());
  CHECK(p.segments[1].items.empty());
  CHECK(p.segments[2].items == items_of({"M"}));
}

TEST_CASE("every symbol of the table is accepted when '*' and the MLA family stay apart", "[patterns][parse]") {
  CHECK_NOTHROW(parse("MG*-E"));
  CHECK_NOTHROW(parse("MGD+CHW-E"));
  CHECK(parse("MGD+CHW-E").physical_count() == 9);
}

TEST_CASE("a character that is no layer symbol is R1 at its position in the main pattern", "[patterns][parse][R1]") {
  check_parse_rejects("M*x-", {"R1", 2});
  check_parse_rejects("a", {"R1", 0});
  check_parse_rejects("M*-|M*- ", {"R1", 7});
  check_parse_rejects("m", {"R1", 0});  // symbols are case sensitive
  check_parse_rejects("MM|M.", {"R1", 4});
}

TEST_CASE("a character that is no layer symbol is R1 at its position in the MTP pattern", "[patterns][parse][R1]") {
  check_parse_rejects("M*M*/Ma", {"R1", 6});
  check_parse_rejects("M*/Ma/Ma", {"R1", 4});
}

TEST_CASE("MTP depth patterns must be identical (R3), reported at the first differing depth", "[patterns][parse][R3]") {
  check_parse_rejects("M*M*/MM/MM-", {"R3", 8});
  check_parse_rejects("M*/*E/*E/*-", {"R3", 9});
  check_parse_rejects("M*/*E/", {"R3", 6});  // one empty part among non-empty ones still differs
}

TEST_CASE("MTP identity (R3) is checked before MTP symbols: 'M*M*/MM/Ma' is R3, not R1", "[patterns][parse][R3]") {
  check_parse_rejects("M*M*/MM/Ma", {"R3", 8});
}

TEST_CASE("a pipe inside an MTP depth pattern is R4 at the pipe", "[patterns][parse][R4]") {
  check_parse_rejects("M*/M|*", {"R4", 4});
  check_parse_rejects("M*/M|*/M|*", {"R4", 4});
}

TEST_CASE("'*' in one model with D or + is R2, at the first symbol that completes the conflict", "[patterns][parse][R2]") {
  check_parse_rejects("*D", {"R2", 1});
  check_parse_rejects("M+M*", {"R2", 3});
  check_parse_rejects("D-*", {"R2", 2});
  check_parse_rejects("M*|MD", {"R2", 4});  // across pipe segments: one model
}

TEST_CASE("the DEV symbols C, H and W belong to the MLA family that '*' excludes (R2)", "[patterns][parse][R2]") {
  check_parse_rejects("*C", {"R2", 1});
  check_parse_rejects("H*", {"R2", 1});
  check_parse_rejects("MW-*", {"R2", 3});
  CHECK_NOTHROW(parse("DCHW+"));
}

TEST_CASE("the attention exclusion (R2) looks through groups at the flattened layers", "[patterns][parse][R2]") {
  check_parse_rejects("[*-][D-]", {"R2", 5});
}

TEST_CASE("the attention exclusion (R2) also applies inside the MTP pattern", "[patterns][parse][R2]") {
  check_parse_rejects("M/*D", {"R2", 3});
}

TEST_CASE("GDN 'G' owns self_attention but is no attention symbol, so it mixes with D", "[patterns][parse][R2]") {
  CHECK_NOTHROW(parse("GD-"));
  CHECK_NOTHROW(parse("G*-"));
}

TEST_CASE("parse_segment validates one pipe-free segment and rejects '|' and '/' as R1", "[patterns][parse][R1]") {
  CHECK(parse_segment("M*-") == items_of({"M", "*", "-"}));
  CHECK(parse_segment("") .empty());
  CHECK(parse_segment("M[M*]-") == items_of({"M", "[M*]", "-"}));
  const PatternError pipe = error_of([] { (void)parse_segment("M|*"); });
  CHECK(rule_code(pipe.rule()) == "R1");
  CHECK(pipe.position() == 1);
  const PatternError slash = error_of([] { (void)parse_segment("M*/*"); });
  CHECK(rule_code(slash.rule()) == "R1");
  CHECK(slash.position() == 2);
  const PatternError mixed = error_of([] { (void)parse_segment("*+"); });
  CHECK(rule_code(mixed.rule()) == "R2");
}

TEST_CASE("a PatternError names its rule code and the pattern in its message", "[patterns][parse][error]") {
  const PatternError e = error_of([] { (void)parse("M*x-"); });
  const std::string what = e.what();
  CHECK_THAT(what, Catch::Contains("R1"));
  CHECK_THAT(what, Catch::Contains("M*x-"));
  CHECK(e.pattern() == "M*x-");
}

TEST_CASE("the caret line repeats the pattern and puts '^' under the offending character", "[patterns][parse][error]") {
  const PatternError e = error_of([] { (void)parse("M[M*"); });
  REQUIRE(e.position() == 1);
  const std::string caret = e.caret_line();
  const auto newline = caret.find('\n');
  REQUIRE(newline != std::string::npos);
  CHECK(caret.substr(0, newline) == "  M[M*");
  const std::string second = caret.substr(newline + 1);
  CHECK(second.rfind("   ^", 0) == 0);  // two spaces of indent, one for 'M', then the caret
}

TEST_CASE("an error about the pattern as a whole has position -1 and no caret line", "[patterns][parse][error]") {
  const PatternError e(Rule::R7_UnevenSplit, "does not divide", "M*M", -1);
  CHECK(e.position() == -1);
  CHECK(e.caret_line().empty());
}

TEST_CASE("rule codes follow the reference numbering of section 4", "[patterns][error]") {
  CHECK(rule_code(Rule::R1_InvalidSymbol) == "R1");
  CHECK(rule_code(Rule::R2_AttentionExclusion) == "R2");
  CHECK(rule_code(Rule::R3_MtpNotIdentical) == "R3");
  CHECK(rule_code(Rule::R4_PipeInMtp) == "R4");
  CHECK(rule_code(Rule::R5_PipesWithStageLayers) == "R5");
  CHECK(rule_code(Rule::R6_VppWithoutPipes) == "R6");
  CHECK(rule_code(Rule::R7_UnevenSplit) == "R7");
  CHECK(rule_code(Rule::R8_SegmentCount) == "R8");
  CHECK(rule_code(Rule::G1_Bracket) == "G1");
  CHECK(rule_code(Rule::G2_MoeNotLast) == "G2");
  CHECK(rule_code(Rule::G3_BracketInMtp) == "G3");
  CHECK(rule_code(Rule::G4_SplitsGroup) == "G4");
  CHECK(rule_code(Rule::G5_NamespaceCollision) == "G5");
  CHECK(rule_code(Rule::GptImport) == "C1");
  CHECK_FALSE(rule_title(Rule::G5_NamespaceCollision).empty());
}

TEST_CASE("to_string of a canonical pattern gives back the same text", "[patterns][parse]") {
  for (std::string_view text : {"M*-", "M[M*]-|[*E]/*E/*E", "||M*", "[*-][*-]|[*E][*E]", "", "/*E", "|"}) {
    INFO("pattern: '" << text << "'");
    CHECK(to_string(parse(text)) == text);
  }
}

TEST_CASE("to_string drops an MTP part of depth 0: 'M*M*/' prints as 'M*M*'", "[patterns][parse]") {
  CHECK(to_string(parse("M*M*/")) == "M*M*");
  CHECK(parse("M*M*/") == parse("M*M*"));
}

TEST_CASE("patterns that differ in layers, segments or MTP depth are not equal", "[patterns][parse]") {
  CHECK_FALSE(parse("M*") == parse("*M"));
  CHECK_FALSE(parse("M*") == parse("M|*"));
  CHECK_FALSE(parse("M*") == parse("[M*]"));
  CHECK_FALSE(parse("M/*E") == parse("M/*E/*E"));
}
