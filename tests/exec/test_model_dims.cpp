// The engine's model description as the schedule sees it (exec::schedule_dims): the plan the
// executor runs and the traces the twin is calibrated from are built from it, so every size the
// engine's layers have must reach it. Oracle: the engine's own parameters, counted tensor by
// tensor, against the schedule's closed-form count (schedule::count_params) of the mapped dims.
#include <catch2/catch.hpp>

#include "ht/engine/exec/executor.hpp"
#include "ht/engine/model.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/params.hpp"

namespace {

// Every size distinct from the others, so that a field mapped from the wrong one shows.
ht::engine::ModelConfig distinct_sizes() {
  ht::engine::ModelConfig c;
  c.vocab_size = 97;
  c.hidden = 40;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 12;
  c.ffn_hidden = 56;
  c.num_experts = 6;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 20;
  c.moe_shared_ffn_hidden = 28;
  c.mamba_state_dim = 10;
  c.mamba_head_dim = 6;
  c.mamba_num_heads = 5;
  c.mamba_num_groups = 1;
  c.mamba_conv_kernel = 4;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 4;
  c.gdn_head_dim_qk = 14;
  c.gdn_head_dim_v = 18;
  c.gdn_conv_kernel = 4;
  c.mla_q_lora_rank = 22;
  c.mla_kv_lora_rank = 26;
  c.mla_qk_head_dim = 12;
  c.mla_qk_pos_head_dim = 8;
  c.mla_v_head_dim = 16;
  return c;
}

}  // namespace

TEST_CASE("schedule_dims carries every size of the engine's layers", "[exec][model]") {
  const ht::engine::ModelConfig cfg = distinct_sizes();
  const ht::schedule::ModelDims d = ht::engine::exec::schedule_dims(cfg, 2, 8);
  for (const char* text : {"*", "W", "-", "E", "M", "G", "+", "M*-E", "[MG]+W-E", "M*E/*-"}) {
    INFO("pattern " << text);
    const auto pattern = ht::patterns::parse(text);
    ht::engine::HybridModel<float> model(pattern, cfg, 1);
    CHECK(ht::schedule::count_params(pattern, d).total == static_cast<double>(model.num_parameters()));
  }
}
