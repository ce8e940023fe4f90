// Specification tests for the symbol table and the per-symbol bookkeeping over a parsed pattern
// (reference sections 1.1, 1.2 and 2.3): counts flatten groups and count MTP once per depth,
// layer maps index the flattened main layers, and the legacy ratio conversion.
#include <algorithm>
#include <string>

#include "ht/patterns/symbols.hpp"
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::error_of;

namespace {

int count_of(const std::string& s, char c) { return static_cast<int>(std::count(s.begin(), s.end(), c)); }

}  // namespace

TEST_CASE("the symbol table lists * D G M + - E in Megatron's counts order, then C H W", "[patterns][symbols]") {
  std::string order;
  for (const SymbolInfo& s : symbol_table()) order += s.symbol;
  CHECK(order == "*DGM+-ECHW");
}

TEST_CASE("structure characters and letters outside the table are not layer symbols", "[patterns][symbols]") {
  for (char c : std::string("|/[] aXm0")) {
    INFO("char '" << c << "'");
    CHECK_FALSE(is_layer_symbol(c));
    CHECK(find_symbol(c) == nullptr);
  }
  CHECK(is_layer_symbol('W'));
}

TEST_CASE("each symbol owns the top-level checkpoint namespaces of reference section 1.1", "[patterns][symbols]") {
  auto owned = [](char c) {
    std::string out;
    for (std::string_view ns : find_symbol(c)->namespaces)
      if (!ns.empty()) out += std::string(ns) + ";";
    return out;
  };
  CHECK(owned('M') == "mixer;");
  CHECK(owned('*') == "self_attention;");
  CHECK(owned('G') == "self_attention;");
  CHECK(owned('-') == "mlp;");
  CHECK(owned('E') == "pre_mlp_layernorm;mlp;");
  for (char c : std::string("D+CHW")) {
    INFO("symbol " << c);
    CHECK(owned(c) == "input_layernorm;self_attention;");
  }
}

TEST_CASE("D, +, C, H and W form the MLA family, but '*' and G do not", "[patterns][symbols]") {
  for (const SymbolInfo& s : symbol_table()) {
    INFO("symbol " << s.symbol);
    CHECK(s.mla_family == (std::string("D+CHW").find(s.symbol) != std::string::npos));
  }
}

TEST_CASE("layer kinds: M and G mix, attention symbols attend, '-' is MLP, 'E' is MoE", "[patterns][symbols]") {
  CHECK(find_symbol('M')->kind == LayerKind::Mixer);
  CHECK(find_symbol('G')->kind == LayerKind::Mixer);
  CHECK(find_symbol('*')->kind == LayerKind::Attention);
  CHECK(find_symbol('+')->kind == LayerKind::Attention);
  CHECK(find_symbol('-')->kind == LayerKind::Mlp);
  CHECK(find_symbol('E')->kind == LayerKind::Moe);
}

TEST_CASE("counts of 'M[M*]E' flatten the group: * 1, M 2, E 1, all else 0", "[patterns][counts]") {
  const auto counts = layer_counts(parse("M[M*]E"));
  CHECK(counts.at('*') == 1);
  CHECK(counts.at('M') == 2);
  CHECK(counts.at('E') == 1);
  for (char c : std::string("DG+-CHW")) {
    INFO("symbol " << c);
    CHECK(counts.at(c) == 0);
  }
}

TEST_CASE("counts include every MTP symbol once per MTP depth", "[patterns][counts]") {
  const auto counts = layer_counts(parse("M*/*E/*E"));
  CHECK(counts.at('*') == 3);
  CHECK(counts.at('M') == 1);
  CHECK(counts.at('E') == 2);
}

TEST_CASE("layer maps of [('M','*','E'), 'M'] are attention {1:0}, mamba {0:0, 3:1}, moe {2:0}", "[patterns][counts]") {
  const auto maps = layer_maps(parse("[M*E]M"));
  CHECK(maps.at('*') == std::map<int, int>{{1, 0}});
  CHECK(maps.at('M') == std::map<int, int>{{0, 0}, {3, 1}});
  CHECK(maps.at('E') == std::map<int, int>{{2, 0}});
  CHECK(maps.at('-').empty());
}

TEST_CASE("layer maps cover the main pattern only, across pipes", "[patterns][counts]") {
  const auto maps = layer_maps(parse("M*|M*/*E"));
  CHECK(maps.at('*') == std::map<int, int>{{1, 0}, {3, 1}});
  CHECK(maps.at('E').empty());
}

TEST_CASE("pattern_from_ratios(10, 0.3, 0.3) has 3 '*', 3 '-' and 4 'M'", "[patterns][ratios]") {
  const std::string p = pattern_from_ratios(10, 0.3, 0.3);
  CHECK(p.size() == 10);
  CHECK(count_of(p, '*') == 3);
  CHECK(count_of(p, '-') == 3);
  CHECK(count_of(p, 'M') == 4);
  CHECK_NOTHROW(parse(p));
}

TEST_CASE("pattern_from_ratios(1, 1.0) is a single attention layer", "[patterns][ratios]") {
  CHECK(pattern_from_ratios(1, 1.0) == "*");
}

TEST_CASE("pattern_from_ratios without attention or MLP is all Mamba", "[patterns][ratios]") {
  CHECK(pattern_from_ratios(4, 0.0) == "MMMM");
}

TEST_CASE("pattern_from_ratios spreads attention layers evenly, never two in a row at low ratio", "[patterns][ratios]") {
  const std::string p = pattern_from_ratios(48, 0.125);
  CHECK(count_of(p, '*') == 6);
  CHECK(p.find("**") == std::string::npos);
  // Evenly: every block of 8 consecutive layers holds exactly one attention layer.
  for (int b = 0; b < 6; ++b) {
    INFO("block " << b << " of '" << p << "'");
    CHECK(count_of(p.substr(static_cast<std::size_t>(8 * b), 8), '*') == 1);
  }
}

TEST_CASE("pattern_from_ratios rejects ratios outside [0, 1] and negative layer counts", "[patterns][ratios]") {
  const auto bad = rule_code(Rule::BadArgument);
  CHECK(rule_code(error_of([] { (void)pattern_from_ratios(10, 1.5); }).rule()) == bad);
  CHECK(rule_code(error_of([] { (void)pattern_from_ratios(10, -0.1); }).rule()) == bad);
  CHECK(rule_code(error_of([] { (void)pattern_from_ratios(10, 0.2, -0.5); }).rule()) == bad);
  CHECK(rule_code(error_of([] { (void)pattern_from_ratios(-1, 0.5); }).rule()) == bad);
}
