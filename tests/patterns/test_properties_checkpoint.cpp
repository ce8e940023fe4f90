// rapidcheck properties of checkpoint naming across pipeline stages and of the GPT import map:
// a stage's keys are the whole model's keys for its layers, and the GPT map pairs the k-th
// attention member and the k-th MLP member with GPT layer k, whatever the grouping and pipes.
#include <rapidcheck/catch.h>

#include "pattern_generators.hpp"
#include "pattern_test_support.hpp"

using namespace ht::patterns;
namespace pg = ht::patterns::gen;

namespace {

// A GPT-importable pattern: n blocks, each an attention and an MLP layer ('-' everywhere, or 'E'
// everywhere) in either order, Mamba layers sprinkled in, some neighbours grouped, some pipes.
rc::Gen<std::string> gpt_compatible_pattern() {
  return rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange(1, 6), rc::gen::element('-', 'E')), [](const std::tuple<int, char>& t) {
    const auto [blocks, mlp] = t;
    const auto piece = rc::gen::tuple(rc::gen::inRange(0, 3), rc::gen::arbitrary<bool>(), rc::gen::inRange(0, 4));
    return rc::gen::map(rc::gen::container<std::vector<std::tuple<int, bool, int>>>(static_cast<std::size_t>(blocks), piece),
                        [mlp](const std::vector<std::tuple<int, bool, int>>& pieces) {
                          std::string out;
                          for (const auto& [mambas, grouped, shape] : pieces) {
                            out += std::string(static_cast<std::size_t>(mambas), 'M');
                            // 'E' must end its group, so a grouped MoE block is always "[*E]".
                            const bool attention_first = mlp == 'E' || shape % 2 == 0;
                            const std::string block = attention_first ? std::string("*") + mlp : std::string(1, mlp) + "*";
                            out += grouped ? "[" + block + "]" : block;
                            if (shape == 3) out += "|";
                          }
                          return out;
                        });
  });
}

}  // namespace

TEST_CASE("the keys of every pipeline stage are the whole model's keys for its layers", "[patterns][property]") {
  rc::prop("stage keys agree", [] {
    const int pp = *rc::gen::inRange(1, 4);
    const int vpp = *rc::gen::inRange(1, 3);
    const ParsedPattern p = parse((*pg::piped_pattern(pp, vpp)).text());
    const auto whole = layer_keys(p);
    PipelineConfig config;
    config.pp = pp;
    config.vpp = vpp;
    std::size_t seen = 0;
    for (const StageSlice& s : allocate_stages(p, config))
      for (const auto& k : stack_keys(s.items, s.physical_offset, s.logical_offset)) {
        RC_ASSERT(k.physical == static_cast<int>(seen));
        RC_ASSERT(k.key_prefix == whole[seen].key_prefix);
        RC_ASSERT(k.namespaces == whole[seen].namespaces);
        ++seen;
      }
    RC_ASSERT(seen == whole.size());
  });
}

TEST_CASE("GPT import pairs the k-th attention and the k-th MLP member with GPT layer k", "[patterns][property]") {
  rc::prop("gpt map", [] {
    const std::string text = *gpt_compatible_pattern();
    const ParsedPattern p = parse(text);
    const GptMapping m = gpt_layer_map(p);
    std::map<int, int> attention, mlp;
    std::vector<int> fresh;
    const std::string flat = p.flattened_symbols();
    for (int i = 0; i < static_cast<int>(flat.size()); ++i) {
      if (flat[static_cast<std::size_t>(i)] == '*') attention[i] = static_cast<int>(attention.size());
      else if (flat[static_cast<std::size_t>(i)] == 'M') fresh.push_back(i);
      else mlp[i] = static_cast<int>(mlp.size());
    }
    RC_ASSERT(m.attention == attention);
    RC_ASSERT(m.mlp == mlp);
    RC_ASSERT(m.fresh == fresh);
    // Every attention/MLP member's sharded key (logical index, namespace) resolves to its GPT layer.
    for (const auto& k : layer_keys(p)) {
      if (k.symbol == 'M') continue;
      const int gpt = k.symbol == '*' ? attention.at(k.physical) : mlp.at(k.physical);
      for (const auto& ns : k.namespaces) RC_ASSERT(m.by_logical_namespace.at({k.logical, ns}) == gpt);
    }
  });
}
