// Specification tests for checkpoint key naming and GPT import (reference section 2.5 and rule
// C1): grouped members publish under their group's logical index, ungrouped patterns keep the
// physical index, the final norm is renamed iff the pattern has '[', and the GPT import map pairs
// the k-th attention and k-th MLP member with GPT layer k.
#include <set>

#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::check_rejection;
using ht::patterns::test::error_of;
using ht::patterns::test::items_of;

namespace {

// Every "decoder.layers.<L>.<namespace>." prefix the keys publish, in order.
std::vector<std::string> all_prefixes(const std::vector<PhysicalLayerKeys>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys)
    for (const auto& p : k.namespace_prefixes()) out.push_back(p);
  return out;
}

void check_gpt_rejects(std::string_view pattern) {
  INFO("pattern: '" << pattern << "'");
  const ParsedPattern parsed = parse(pattern);
  const PatternError e = error_of([&] { (void)gpt_layer_map(parsed); });
  CHECK(rule_code(e.rule()) == "C1");
}

}  // namespace

TEST_CASE("'M[M*]-' publishes decoder.layers.0.mixer, 1.mixer, 1.self_attention, 2.mlp", "[patterns][checkpoint]") {
  const auto keys = layer_keys(parse("M[M*]-"));
  REQUIRE(keys.size() == 4);
  CHECK(all_prefixes(keys) == std::vector<std::string>{"decoder.layers.0.mixer.", "decoder.layers.1.mixer.",
                                                       "decoder.layers.1.self_attention.", "decoder.layers.2.mlp."});
  CHECK(keys[1].physical == 1);
  CHECK(keys[2].physical == 2);
  CHECK(keys[2].logical == 1);
  CHECK(keys[2].in_group);
  CHECK_FALSE(keys[3].in_group);
  CHECK(keys[3].physical == 3);
  CHECK(keys[3].logical == 2);
  CHECK(keys[3].key_prefix == "decoder.layers.2.");
  CHECK(keys[2].symbol == '*');
}

TEST_CASE("an ungrouped pattern keeps main's physical keys: logical index == physical index", "[patterns][checkpoint]") {
  const auto keys = layer_keys(parse("M*-|ME"));
  REQUIRE(keys.size() == 5);
  for (int i = 0; i < 5; ++i) {
    INFO("physical " << i);
    CHECK(keys[i].physical == i);
    CHECK(keys[i].logical == i);
    CHECK(keys[i].key_prefix == "decoder.layers." + std::to_string(i) + ".");
  }
  CHECK(keys[4].namespaces == std::vector<std::string>{"pre_mlp_layernorm", "mlp"});
}

TEST_CASE("'[*-]' publishes layer 0 self_attention and mlp, and nothing under layer 1", "[patterns][checkpoint]") {
  const auto prefixes = all_prefixes(layer_keys(parse("[*-]")));
  const std::set<std::string> got(prefixes.begin(), prefixes.end());
  CHECK(got.count("decoder.layers.0.self_attention."));
  CHECK(got.count("decoder.layers.0.mlp."));
  CHECK_FALSE(got.count("decoder.layers.1.mlp."));
}

TEST_CASE("stage 1 of '[*-][*-]|[*E][*E]' publishes logical layers 2 and 3", "[patterns][checkpoint]") {
  const ParsedPattern p = parse("[*-][*-]|[*E][*E]");
  PipelineConfig config;
  config.pp = 2;
  const StageSlice s = select_stage(p, config, 1, std::nullopt);
  const auto keys = stack_keys(s.items, s.physical_offset, s.logical_offset);
  CHECK(all_prefixes(keys) ==
        std::vector<std::string>{"decoder.layers.2.self_attention.", "decoder.layers.2.pre_mlp_layernorm.",
                                 "decoder.layers.2.mlp.", "decoder.layers.3.self_attention.",
                                 "decoder.layers.3.pre_mlp_layernorm.", "decoder.layers.3.mlp."});
  REQUIRE(keys.size() == 4);
  CHECK(keys.front().physical == 4);
  CHECK(keys.back().physical == 7);
}

TEST_CASE("the keys of a stage equal the whole pattern's keys for that stage's layers", "[patterns][checkpoint]") {
  const ParsedPattern p = parse("M[M*]-|[*E]M[*-]");
  const auto whole = layer_keys(p);
  PipelineConfig config;
  config.pp = 2;
  for (const StageSlice& s : allocate_stages(p, config)) {
    const auto part = stack_keys(s.items, s.physical_offset, s.logical_offset);
    for (const auto& k : part) {
      INFO("physical " << k.physical);
      REQUIRE(k.physical < static_cast<int>(whole.size()));
      CHECK(k.key_prefix == whole[static_cast<std::size_t>(k.physical)].key_prefix);
      CHECK(k.namespaces == whole[static_cast<std::size_t>(k.physical)].namespaces);
    }
  }
}

TEST_CASE("a directly built stack defaults its logical offset to its physical offset", "[patterns][checkpoint]") {
  const auto keys = stack_keys(items_of({"M", "*"}), 5);
  REQUIRE(keys.size() == 2);
  CHECK(keys[0].physical == 5);
  CHECK(keys[0].key_prefix == "decoder.layers.5.");
  CHECK(keys[1].key_prefix == "decoder.layers.6.");
  const auto grouped = stack_keys(items_of({"[M*]", "-"}), 5, 2);
  CHECK(all_prefixes(grouped) ==
        std::vector<std::string>{"decoder.layers.2.mixer.", "decoder.layers.2.self_attention.", "decoder.layers.3.mlp."});
}

TEST_CASE("the final norm is published as final_layernorm iff the main pattern has a group", "[patterns][checkpoint]") {
  CHECK(final_norm_prefix(parse("M[M*]-")) == "decoder.final_layernorm.");
  CHECK(final_norm_prefix(parse("M*|[*E]")) == "decoder.final_layernorm.");
  CHECK(final_norm_prefix(parse("M*-")) == "decoder.final_norm.");
  CHECK(final_norm_prefix(parse("M*-/*E")) == "decoder.final_norm.");
}

TEST_CASE("MTP depths publish under mtp.layers.<d>, their inner layers under mtp_model_layer.layers.<j>", "[patterns][checkpoint]") {
  const ParsedPattern p = parse("M*/*E/*E");
  CHECK(mtp_layer_prefixes(p) == std::vector<std::string>{"mtp.layers.0.", "mtp.layers.1."});
  CHECK(mtp_inner_prefixes(p, 1) ==
        std::vector<std::string>{"mtp.layers.1.mtp_model_layer.layers.0.", "mtp.layers.1.mtp_model_layer.layers.1."});
  CHECK(mtp_layer_prefixes(parse("M*")).empty());
}

TEST_CASE("GPT import of 'M*-M*-' maps attention {1:0, 4:1}, MLP {2:0, 5:1}, fresh {0, 3}", "[patterns][checkpoint][gpt]") {
  const GptMapping m = gpt_layer_map(parse("M*-M*-"));
  CHECK(m.attention == std::map<int, int>{{1, 0}, {4, 1}});
  CHECK(m.mlp == std::map<int, int>{{2, 0}, {5, 1}});
  CHECK(m.fresh == std::vector<int>{0, 3});
  const std::map<std::pair<int, std::string>, int> by_key{
      {{1, "self_attention"}, 0}, {{2, "mlp"}, 0}, {{4, "self_attention"}, 1}, {{5, "mlp"}, 1}};
  CHECK(m.by_logical_namespace == by_key);
}

TEST_CASE("GPT import of '**--' maps attention {0:0, 1:1}", "[patterns][checkpoint][gpt]") {
  const GptMapping m = gpt_layer_map(parse("**--"));
  CHECK(m.attention == std::map<int, int>{{0, 0}, {1, 1}});
  CHECK(m.mlp == std::map<int, int>{{2, 0}, {3, 1}});
  CHECK(m.fresh.empty());
}

TEST_CASE("GPT import ignores pipes", "[patterns][checkpoint][gpt]") {
  const GptMapping piped = gpt_layer_map(parse("M*-|M*-"));
  const GptMapping flat = gpt_layer_map(parse("M*-M*-"));
  CHECK(piped.attention == flat.attention);
  CHECK(piped.mlp == flat.mlp);
  CHECK(piped.fresh == flat.fresh);
}

TEST_CASE("GPT import of grouped members resolves sharded keys by (logical index, namespace)", "[patterns][checkpoint][gpt]") {
  const GptMapping m = gpt_layer_map(parse("[M*-][M*-]"));
  CHECK(m.attention == std::map<int, int>{{1, 0}, {4, 1}});
  CHECK(m.mlp == std::map<int, int>{{2, 0}, {5, 1}});
  CHECK(m.fresh == std::vector<int>{0, 3});
  const std::map<std::pair<int, std::string>, int> by_key{
      {{0, "self_attention"}, 0}, {{0, "mlp"}, 0}, {{1, "self_attention"}, 1}, {{1, "mlp"}, 1}};
  CHECK(m.by_logical_namespace == by_key);
}

TEST_CASE("GPT import of '[*E]' groups: the logical index already is the GPT layer", "[patterns][checkpoint][gpt]") {
  const GptMapping m = gpt_layer_map(parse("[*E][*E]M"));
  for (const auto& [key, gpt] : m.by_logical_namespace) {
    INFO("logical " << key.first << " namespace " << key.second);
    CHECK(key.first == gpt);
  }
  CHECK(m.by_logical_namespace.count({1, "pre_mlp_layernorm"}));
  CHECK(m.by_logical_namespace.size() == 6);
  CHECK(m.fresh == std::vector<int>{4});
}

TEST_CASE("GPT import rejects MTP patterns (C1)", "[patterns][checkpoint][gpt]") { check_gpt_rejects("*-/*-"); }

TEST_CASE("GPT import rejects symbols outside * - E M (C1)", "[patterns][checkpoint][gpt]") {
  check_gpt_rejects("*-G-");
  check_gpt_rejects("D-D-");
  check_gpt_rejects("[G-]*-");
}

TEST_CASE("GPT import rejects dense MLP mixed with MoE (C1)", "[patterns][checkpoint][gpt]") { check_gpt_rejects("*-*E"); }

TEST_CASE("GPT import rejects unequal or zero attention and MLP counts (C1)", "[patterns][checkpoint][gpt]") {
  check_gpt_rejects("**-");
  check_gpt_rejects("*--");
  check_gpt_rejects("MM");
  check_gpt_rejects("");
}

TEST_CASE("a count mismatch in GPT import is about the whole pattern (position -1)", "[patterns][checkpoint][gpt]") {
  const ParsedPattern p = parse("M*-*");
  check_rejection(error_of([&] { (void)gpt_layer_map(p); }), {"C1", -1});
}
