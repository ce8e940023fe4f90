// Specification tests for bracketed layer groups (reference sections 2.1, 2.2 and 4: G1, G2, G3,
// G5): a group is one logical layer made of several physical layers; every malformed group is
// rejected with its rule and a caret on the character to blame.
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::check_parse_rejects;
using ht::patterns::test::items_of;

TEST_CASE("'M[M*]-' parses to M, the group (M, *), and -", "[patterns][groups]") {
  const ParsedPattern p = parse("M[M*]-");
  REQUIRE(p.segment_count() == 1);
  const auto& items = p.segments[0].items;
  REQUIRE(items == items_of({"M", "[M*]", "-"}));
  CHECK(items[0].position == 0);
  CHECK(items[1].position == 1);  // a group's position is its '['
  CHECK(items[2].position == 5);
  CHECK(p.physical_count() == 4);
  CHECK(p.logical_count() == 3);
  CHECK(p.has_groups());
  CHECK(p.flattened_symbols() == "MM*-");
}

TEST_CASE("'[M*E]' is one logical layer and three physical layers", "[patterns][groups]") {
  const ParsedPattern p = parse("[M*E]");
  CHECK(p.items() == items_of({"[M*E]"}));
  CHECK(p.physical_count() == 3);
  CHECK(p.logical_count() == 1);
  CHECK(p.items()[0].physical_count() == 3);
  CHECK(p.items()[0].terminal() == 'E');
}

TEST_CASE("a one-member group is still a group", "[patterns][groups]") {
  const ParsedPattern p = parse("[M]-");
  CHECK(p.items() == items_of({"[M]", "-"}));
  CHECK(p.has_groups());
}

TEST_CASE("a pattern without brackets has no groups even when it has pipes and MTP", "[patterns][groups]") {
  CHECK_FALSE(parse("M*|-E/*E").has_groups());
}

TEST_CASE("an opening bracket that is never closed is G1 at that bracket", "[patterns][groups][G1]") {
  check_parse_rejects("M[M*", {"G1", 1});
  check_parse_rejects("[*-]|[*E", {"G1", 5});
}

TEST_CASE("a group cannot cross a pipe: '[M|*]' leaves its opening bracket unclosed (G1)", "[patterns][groups][G1]") {
  check_parse_rejects("[M|*]", {"G1", 0});
}

TEST_CASE("an empty group '[]' is G1 at its opening bracket", "[patterns][groups][G1]") {
  check_parse_rejects("M[]", {"G1", 1});
  check_parse_rejects("[]M", {"G1", 0});
}

TEST_CASE("a nested group is G1 at the inner opening bracket", "[patterns][groups][G1]") {
  check_parse_rejects("M[[M]]", {"G1", 2});
  check_parse_rejects("M[M[*]]", {"G1", 3});
}

TEST_CASE("a closing bracket that closes no group is G1 at that bracket", "[patterns][groups][G1]") {
  check_parse_rejects("M]", {"G1", 1});
  check_parse_rejects("[M]]", {"G1", 3});
  check_parse_rejects("M*|]-", {"G1", 3});
}

TEST_CASE("an 'E' that is not last in its group is G2 at that 'E'", "[patterns][groups][G2]") {
  check_parse_rejects("M[EM]", {"G2", 2});
  check_parse_rejects("[*E-]", {"G2", 2});
  check_parse_rejects("[EE]", {"G2", 1});
}

TEST_CASE("'E' alone or last in a group is legal, and so is '-' anywhere in a group", "[patterns][groups][G2]") {
  CHECK_NOTHROW(parse("[E]"));
  CHECK_NOTHROW(parse("[M*E]"));
  CHECK_NOTHROW(parse("[-*]"));  // parser accepts it; only the overlap builder (O1) rejects it
}

TEST_CASE("an invalid symbol inside a group is R1 at that symbol", "[patterns][groups][R1]") {
  check_parse_rejects("M[M*]X", {"R1", 5});
  check_parse_rejects("[MX]", {"R1", 2});
}

TEST_CASE("brackets in an MTP pattern are G3 at the first bracket", "[patterns][groups][G3]") {
  check_parse_rejects("M*/[*E]", {"G3", 3});
  check_parse_rejects("M*/*[E]/*[E]", {"G3", 4});
}

TEST_CASE("MTP identity (R3) is checked before brackets in MTP (G3)", "[patterns][groups][G3]") {
  check_parse_rejects("M*/[*E]/*E", {"R3", 8});
}

TEST_CASE("group members that share a checkpoint namespace are G5 at the second owner", "[patterns][groups][G5]") {
  check_parse_rejects("[**]", {"G5", 2});   // self_attention twice
  check_parse_rejects("[*G]", {"G5", 2});   // G also owns self_attention
  check_parse_rejects("[MM]", {"G5", 2});   // mixer twice
  check_parse_rejects("[-E]", {"G5", 2});   // mlp twice
  check_parse_rejects("[--]", {"G5", 2});   // mlp twice
  check_parse_rejects("[D+]", {"G5", 2});   // input_layernorm and self_attention twice
  check_parse_rejects("M[M-M]", {"G5", 4}); // the third member collides with the first
  check_parse_rejects("-|M[W+]", {"G5", 5});
}

TEST_CASE("groups whose members own disjoint namespaces are legal", "[patterns][groups][G5]") {
  for (std::string_view text : {"[*-]", "[*E]", "[M*E]", "[M*]", "[M-]", "[G-]", "[+E]", "[DE]", "[MGE]", "[CE]"}) {
    INFO("pattern: '" << text << "'");
    CHECK_NOTHROW(parse(text));
  }
}

TEST_CASE("ParseOptions{.check_namespaces=false} accepts groups with colliding namespaces", "[patterns][groups][G5]") {
  const ParseOptions lenient{.check_namespaces = false};
  for (std::string_view text : {"[**]", "[*G]", "[MM]", "[-E]", "[--]", "[D+]"}) {
    INFO("pattern: '" << text << "'");
    const ParsedPattern p = parse(text, lenient);
    REQUIRE(p.items().size() == 1);
    CHECK_FALSE(namespaces_disjoint(p.items()[0]));
  }
}

TEST_CASE("the namespace predicate is true exactly for disjoint member namespaces", "[patterns][groups][G5]") {
  CHECK(namespaces_disjoint(Item{"M*E", true, 0}));
  CHECK(namespaces_disjoint(Item{"+E", true, 0}));
  CHECK(namespaces_disjoint(Item{"M", false, 0}));
  CHECK_FALSE(namespaces_disjoint(Item{"-E", true, 0}));
  CHECK_FALSE(namespaces_disjoint(Item{"*G", true, 0}));
  CHECK_FALSE(namespaces_disjoint(Item{"DW", true, 0}));
}

TEST_CASE("structural bracket errors (G1) are not hidden by the lenient namespace option", "[patterns][groups][G1]") {
  check_parse_rejects("M[M*", {"G1", 1}, ParseOptions{.check_namespaces = false});
}

TEST_CASE("flatten dissolves every group and keeps pipes and MTP", "[patterns][groups]") {
  const ParsedPattern flat = flatten(parse("M[*E]-|[M*]/*E"));
  CHECK_FALSE(flat.has_groups());
  CHECK(flat.flattened_symbols() == "M*E-M*");
  REQUIRE(flat.segment_count() == 2);
  CHECK(flat.segments[0].items == items_of({"M", "*", "E", "-"}));
  CHECK(flat.segments[1].items == items_of({"M", "*"}));
  CHECK(flat.mtp == "*E");
  CHECK(flat.mtp_depths == 1);
}
