// The worked example of reference section 5.3, end to end through the pattern library: the
// pattern "[*-][*-]|[*E][*E]/*E" on PP=2, and the rejected variants listed with it.
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::check_parse_rejects;
using ht::patterns::test::error_of;
using ht::patterns::test::items_of;

namespace {

PipelineConfig pp(int n) {
  PipelineConfig c;
  c.pp = n;
  return c;
}

std::vector<std::string> prefixes_of(const StageSlice& s) {
  std::vector<std::string> out;
  for (const auto& k : stack_keys(s.items, s.physical_offset, s.logical_offset))
    for (const auto& p : k.namespace_prefixes()) out.push_back(p);
  return out;
}

}  // namespace

TEST_CASE("worked example: '[*-][*-]|[*E][*E]/*E' has 8 physical, 4 logical layers and MTP depth 1", "[patterns][example53]") {
  const ParsedPattern p = parse("[*-][*-]|[*E][*E]/*E");
  CHECK(p.main == "[*-][*-]|[*E][*E]");
  CHECK(p.mtp == "*E");
  CHECK(p.mtp_depths == 1);
  CHECK(p.physical_count() == 8);
  CHECK(p.logical_count() == 4);
}

TEST_CASE("worked example stage 0: two [*-] groups, offsets 0/0, layer numbers 1..4", "[patterns][example53]") {
  const StageSlice s = select_stage(parse("[*-][*-]|[*E][*E]/*E"), pp(2), 0, std::nullopt);
  CHECK(s.items == items_of({"[*-]", "[*-]"}));
  CHECK(s.physical_offset == 0);
  CHECK(s.logical_offset == 0);
  const auto keys = stack_keys(s.items, s.physical_offset, s.logical_offset);
  REQUIRE(keys.size() == 4);
  for (int j = 0; j < 4; ++j) CHECK(keys[j].physical + 1 == j + 1);  // layer_number = physical + 1
  CHECK(prefixes_of(s) == std::vector<std::string>{"decoder.layers.0.self_attention.", "decoder.layers.0.mlp.",
                                                   "decoder.layers.1.self_attention.", "decoder.layers.1.mlp."});
}

TEST_CASE("worked example stage 1: two [*E] groups at physical 4 / logical 2, layer numbers 5..8", "[patterns][example53]") {
  const ParsedPattern p = parse("[*-][*-]|[*E][*E]/*E");
  const StageSlice s = select_stage(p, pp(2), 1, std::nullopt);
  CHECK(s.items == items_of({"[*E]", "[*E]"}));
  CHECK(s.physical_offset == 4);
  CHECK(s.logical_offset == 2);
  const auto keys = stack_keys(s.items, s.physical_offset, s.logical_offset);
  REQUIRE(keys.size() == 4);
  CHECK(keys.front().physical + 1 == 5);
  CHECK(keys.back().physical + 1 == 8);
  CHECK(prefixes_of(s) == std::vector<std::string>{
                              "decoder.layers.2.self_attention.", "decoder.layers.2.pre_mlp_layernorm.",
                              "decoder.layers.2.mlp.", "decoder.layers.3.self_attention.",
                              "decoder.layers.3.pre_mlp_layernorm.", "decoder.layers.3.mlp."});
  CHECK(final_norm_prefix(p) == "decoder.final_layernorm.");
}

TEST_CASE("worked example rejected variant '[*E-]': E not last (G2)", "[patterns][example53]") {
  check_parse_rejects("[*E-]", {"G2", 2});
}

TEST_CASE("worked example variant '[-*]' passes the parser (only the overlap builder rejects it)", "[patterns][example53]") {
  CHECK(parse("[-*]").items() == items_of({"[-*]"}));
}

TEST_CASE("worked example rejected variant '[**]': namespace collision (G5)", "[patterns][example53]") {
  check_parse_rejects("[**]", {"G5", 2});
}

TEST_CASE("worked example rejected variant with an unclosed second group (G1)", "[patterns][example53]") {
  check_parse_rejects("[*-]|[*E", {"G1", 5});
}

TEST_CASE("worked example '[*-][*E]' without pipes splits on PP=2 but not on PP=4 (G4)", "[patterns][example53]") {
  const ParsedPattern p = parse("[*-][*E]");
  CHECK(allocate_stages(p, pp(2)).size() == 2);
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, pp(4)); }).rule()) == "G4");
}

TEST_CASE("worked example stage 0 imports from GPT, but not once an MTP part is added (C1)", "[patterns][example53]") {
  CHECK(gpt_layer_map(parse("[*-][*-]")).attention == std::map<int, int>{{0, 0}, {2, 1}});
  const ParsedPattern with_mtp = parse("[*-][*-]/*-");
  CHECK(rule_code(error_of([&] { (void)gpt_layer_map(with_mtp); }).rule()) == "C1");
}
