// rapidcheck generators for the engine's equivalence properties: model configs small enough that
// one executor step takes milliseconds, patterns the CPU executor runs (engine-supported symbols,
// groups the overlap can split, no pipes, MTP depths only where asked), and an EngineCase
// bundling both with EP size, microbatch count, batch shape and seeds. Needs ht_engine.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <string>

#include "ht/engine/config.hpp"

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

// One logical layer the CPU executor runs, with or without overlap: single symbols, and groups
// whose pre-layers the overlap can split ending in '-' or 'E'. Two families, because '*' may not
// share a model with the MLA family (rule R2; 'W' belongs to it and is not an overlap pre-layer).
inline rc::Gen<std::string> engine_item(bool mla, bool overlap) {
  if (mla)
    return rc::gen::weightedOneOf<std::string>(
        {{3, overlap ? rc::gen::element<std::string>("M", "G", "-", "E", "+")
                     : rc::gen::element<std::string>("M", "G", "-", "E", "W", "+")},
         {4, rc::gen::element<std::string>("[+E]", "[ME]", "[GE]", "[M+E]", "[G-]", "[+-]", "[M-]")}});
  return rc::gen::weightedOneOf<std::string>(
      {{3, rc::gen::element<std::string>("M", "*", "G", "-", "E")},
       {4, rc::gen::element<std::string>("[*E]", "[ME]", "[GE]", "[M*E]", "[G-]", "[*-]", "[M-]", "[M*-]")}});
}

// 1 to 3 logical layers of one family with at least one MoE layer; `overlap`: only layers the
// overlap builder can split (rule O1).
inline rc::Gen<std::string> engine_pattern(bool overlap = false) {
  const auto lists = rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange<std::size_t>(1, 4), rc::gen::arbitrary<bool>()),
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

// Optional MTP depths for a generated pattern: none half of the time, else 1 or 2 depths of a
// pattern the executor runs as one layer plan (MLP/MoE last). Symbols of neither attention
// family, so any main pattern takes them (rule R2).
inline rc::Gen<std::string> engine_mtp_suffix() {
  return rc::gen::weightedOneOf<std::string>(
      {{4, rc::gen::just(std::string())},
       {3, rc::gen::element<std::string>("/E", "/ME", "/GE", "/M-", "/-", "/M")},
       {1, rc::gen::element<std::string>("/E/E", "/ME/ME", "/G-/G-")}});
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
