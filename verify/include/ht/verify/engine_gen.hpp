// rapidcheck generators for the engine's equivalence properties: model configs small enough that
// one executor step takes milliseconds, patterns the CPU executor runs (engine-supported symbols,
// groups the overlap can split, no pipes, MTP depths only where asked), and an EngineCase
// bundling both with EP size, microbatch count, batch shape and seeds. Needs ht_engine.
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/patterns/symbols.hpp"

namespace ht::verify::gen {

struct EngineCase {
  std::string pattern;
  engine::ModelConfig model;
  int ep = 1;
  int microbatches = 1;
  int batch = 1;  // sequences per microbatch
  int seq = 6;
  std::uint64_t data_seed = 0;
  std::uint64_t weight_seed = 0;
};

// The fixed part of the tiny models: every layer type runs in well under a millisecond.
inline engine::ModelConfig tiny_model_base() {
  engine::ModelConfig c;
  c.vocab_size = 32;
  c.hidden = 16;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.window = 4;
  c.ffn_hidden = 12;
  c.num_experts = 4;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 8;
  c.mamba_state_dim = 4;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 2;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 2;
  c.gdn_head_dim_qk = 4;
  c.gdn_head_dim_v = 4;
  c.mla_q_lora_rank = 8;
  c.mla_kv_lora_rank = 8;
  c.mla_qk_head_dim = 4;
  c.mla_qk_pos_head_dim = 2;
  c.mla_v_head_dim = 4;
  return c;
}

// Tiny models that vary what changes the math's shape: hidden 8 or 16, GQA or not, window 2 or
// 4, 4 or 8 experts, top-1 or top-2, with or without a shared expert.
inline rc::Gen<engine::ModelConfig> tiny_model_config() {
  return rc::gen::map(rc::gen::tuple(rc::gen::element(8, 16), rc::gen::element(4, 8), rc::gen::element(1, 2),
                                     rc::gen::element(0, 8), rc::gen::element(1, 2), rc::gen::element(2, 4)),
                      [](const std::tuple<int, int, int, int, int, int>& t) {
                        const auto [hidden, experts, topk, shared, kv_heads, window] = t;
                        engine::ModelConfig c = tiny_model_base();
                        c.hidden = hidden;
                        c.num_kv_heads = kv_heads;
                        c.window = window;
                        c.num_experts = experts;
                        c.moe_topk = topk;
                        c.moe_shared_ffn_hidden = shared;
                        return c;
                      });
}

// One logical layer the CPU executor runs, drawn from every valid form rather than a menu: a
// single symbol, or a group of 1-4 members of one family whose checkpoint namespaces are pairwise
// disjoint (rule G5, read from the symbol table), in any order, with at most one MLP/MoE terminal
// and that one last (G2 for 'E'; the executor splits every layer as the overlap does, O1). Two
// families, because '*' may not share a model with the MLA family (R2); under `overlap` the
// pre-layers are those the overlap builder splits (O1: 'W' is not one).
inline rc::Gen<std::string> engine_item(bool mla, bool overlap) {
  return rc::gen::exec([mla, overlap] {
    std::string pre = mla ? (overlap ? "MG+" : "MG+W") : "MG*";
    const std::string terminals = "-E";
    const bool group = *rc::gen::weightedElement<bool>({{3, false}, {4, true}});
    if (!group) return std::string(1, *rc::gen::elementOf(pre + terminals));
    // Members: the pre-layer symbols in a random order, each kept while the drawn size allows
    // and its namespaces are free; then possibly a terminal.
    const int size = *rc::gen::weightedElement<int>({{1, 1}, {3, 2}, {3, 3}, {2, 4}});
    const bool with_terminal = *rc::gen::arbitrary<bool>();
    const std::vector<char> order = *rc::gen::map(
        rc::gen::container<std::vector<int>>(pre.size(), rc::gen::arbitrary<int>()), [pre](const std::vector<int>& keys) {
          std::vector<std::pair<int, char>> k;
          for (std::size_t i = 0; i < pre.size(); ++i) k.emplace_back(keys[i], pre[i]);
          std::stable_sort(k.begin(), k.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          std::vector<char> out;
          for (const auto& [_, c] : k) out.push_back(c);
          return out;
        });
    std::string members;
    std::set<std::string_view> taken;
    auto fits = [&](char c) {
      for (std::string_view ns : patterns::find_symbol(c)->namespaces)
        if (!ns.empty() && taken.count(ns)) return false;
      return true;
    };
    auto take = [&](char c) {
      for (std::string_view ns : patterns::find_symbol(c)->namespaces)
        if (!ns.empty()) taken.insert(ns);
      members += c;
    };
    const int pre_wanted = with_terminal ? size - 1 : size;
    for (char c : order)
      if (static_cast<int>(members.size()) < pre_wanted && fits(c)) take(c);
    if (with_terminal || members.empty()) {
      const char t = *rc::gen::elementOf(terminals);
      if (fits(t)) take(t);
    }
    if (members.empty()) members = "E";
    return "[" + members + "]";
  });
}

// 1 to 4 logical layers of one family with at least one MoE layer; `overlap`: only layers the
// overlap builder can split (rule O1).
inline rc::Gen<std::string> engine_pattern(bool overlap = false) {
  const auto lists = rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange<std::size_t>(1, 5), rc::gen::arbitrary<bool>()),
                                     [overlap](const std::tuple<std::size_t, bool>& t) {
                                       return rc::gen::container<std::vector<std::string>>(std::get<0>(t),
                                                                                             engine_item(std::get<1>(t), overlap));
                                     });
  return rc::gen::map(lists, [](const std::vector<std::string>& items) {
    std::string out;
    for (const auto& it : items) out += it;
    return out.find('E') == std::string::npos ? out + "E" : out;
  });
}

// Optional MTP depths for a generated pattern: none half of the time, else 1 to 3 depths of an
// inner pattern the executor runs as one layer plan: 0-2 pre-layers, then possibly one MLP/MoE
// terminal (never empty). Symbols of neither attention family, so any main pattern takes them (R2).
inline rc::Gen<std::string> engine_mtp_suffix() {
  return rc::gen::exec([] {
    if (*rc::gen::arbitrary<bool>()) return std::string();
    std::string inner = *rc::gen::container<std::string>(*rc::gen::inRange(0, 3), rc::gen::element('M', 'G'));
    if (inner.empty() || *rc::gen::arbitrary<bool>()) inner += *rc::gen::element('-', 'E');
    const int depths = *rc::gen::weightedElement<int>({{4, 1}, {2, 2}, {1, 3}});
    std::string out;
    for (int d = 0; d < depths; ++d) out += "/" + inner;
    return out;
  });
}

// Patterns as engine_pattern(false), sometimes with MTP depths: for the properties whose
// schedules hybrid MTP may use (sequential, PP = 1; never the overlap, rule O3).
inline rc::Gen<std::string> engine_pattern_with_mtp() {
  return rc::gen::map(rc::gen::tuple(engine_pattern(false), engine_mtp_suffix()),
                      [](const std::tuple<std::string, std::string>& t) { return std::get<0>(t) + std::get<1>(t); });
}

// EP in {1, 2, 4} (the experts divide evenly), 1-3 microbatches of 1-2 sequences of 4-8 tokens.
inline rc::Gen<EngineCase> engine_case(rc::Gen<std::string> patterns = engine_pattern()) {
  return rc::gen::map(
      rc::gen::tuple(patterns, tiny_model_config(), rc::gen::element(1, 2, 4), rc::gen::inRange(1, 4),
                     rc::gen::inRange(1, 3), rc::gen::inRange(4, 9), rc::gen::inRange<std::uint64_t>(0, 1000),
                     rc::gen::inRange<std::uint64_t>(0, 1000)),
      [](const std::tuple<std::string, engine::ModelConfig, int, int, int, int, std::uint64_t, std::uint64_t>& t) {
        const auto& [pattern, model, ep, mbs, batch, seq, data_seed, weight_seed] = t;
        return EngineCase{pattern, model, ep, mbs, batch, seq, data_seed, weight_seed};
      });
}

}  // namespace ht::verify::gen
