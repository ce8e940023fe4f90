// rapidcheck properties of checkpoint naming across pipeline stages and of the GPT import map:
// a stage's keys are the whole model's keys for its layers, and the GPT map pairs the k-th
// attention member and the k-th MLP member with GPT layer k, whatever the grouping and pipes.
#include <rapidcheck/catch.h>

#include "ht/verify/pattern_gen.hpp"
#include "pattern_test_support.hpp"

using namespace ht::patterns;
namespace pg = ht::verify::gen;

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
    const std::string text = *pg::gpt_compatible_pattern();
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
