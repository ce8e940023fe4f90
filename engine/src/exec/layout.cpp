// The stage layout of a plan (which rank holds which logical layers, the embedding and the loss),
// checked against the plan's rules, and the model description the plan is built from.
#include <algorithm>

#include "state.hpp"

namespace ht::engine::exec {
namespace impl {

StageLayout read_layout(const schedule::Plan& plan, int layers, int mtp_depths) {
  StageLayout out;
  const int n = plan.global_ranks();
  out.ranks.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto& rp = plan.ranks[static_cast<std::size_t>(r)];
    if (rp.rank != r || rp.pp_rank != r / plan.dp || rp.dp_rank != r % plan.dp)
      fail("plan rank " + std::to_string(r) + " is not pp rank " + std::to_string(r / plan.dp) + ", dp rank " +
           std::to_string(r % plan.dp));
    if (plan.ep < 1 || rp.ep_rank != rp.dp_rank % plan.ep)
      fail("plan rank " + std::to_string(r) + " is ep rank " + std::to_string(rp.ep_rank) + ", not dp rank " +
           std::to_string(rp.dp_rank) + " mod ep " + std::to_string(plan.ep));
    auto& lo = out.ranks[static_cast<std::size_t>(r)];
    lo.pp_rank = rp.pp_rank;
    lo.dp_rank = rp.dp_rank;
    lo.ep_rank = rp.ep_rank;
    lo.holds.assign(static_cast<std::size_t>(layers), 0);
  }
  out.layer_stage.assign(static_cast<std::size_t>(layers), -1);
  out.layer_vp.assign(static_cast<std::size_t>(layers), -1);
  for (const auto& node : plan.nodes) {
    if (node.rank < 0 || node.rank >= n) fail("node " + node.label() + " runs on rank " + std::to_string(node.rank));
    if (node.vp_stage < 0 || node.vp_stage >= plan.chunks)
      fail("node " + node.label() + " names model chunk " + std::to_string(node.vp_stage) + " of " +
           std::to_string(plan.chunks));
    auto& lo = out.ranks[static_cast<std::size_t>(node.rank)];
    if (node.slot == Slot::PreProcess) lo.first = true;
    if (node.slot == Slot::PostProcess) lo.last = true;
    if (node.layer < 0) continue;
    if (node.mtp) {
      // MTP depths follow the decoder in the model's last chunk (reference section 3.2).
      if (node.layer >= mtp_depths)
        fail("node " + node.label() + " names MTP depth " + std::to_string(node.layer) + " of " +
             std::to_string(mtp_depths));
      if (lo.pp_rank != plan.pp - 1 || node.vp_stage != plan.chunks - 1)
        fail("MTP node " + node.label() + " does not run in the model's last chunk");
      continue;
    }
    if (node.layer >= layers)
      fail("node " + node.label() + " names logical layer " + std::to_string(node.layer) + " of " +
           std::to_string(layers));
    const auto l = static_cast<std::size_t>(node.layer);
    lo.holds[l] = 1;
    if (out.layer_stage[l] < 0) {
      out.layer_stage[l] = lo.pp_rank;
      out.layer_vp[l] = node.vp_stage;
    } else if (out.layer_stage[l] != lo.pp_rank || out.layer_vp[l] != node.vp_stage) {
      fail("logical layer " + std::to_string(l) + " runs in two pipeline stages or model chunks");
    }
  }
  for (std::size_t l = 0; l < out.layer_stage.size(); ++l)
    if (out.layer_stage[l] < 0) fail("logical layer " + std::to_string(l) + " has no node in the plan");
  for (int r = 0; r < n; ++r) {
    const auto& lo = out.ranks[static_cast<std::size_t>(r)];
    for (std::size_t l = 0; l < lo.holds.size(); ++l)
      if ((lo.holds[l] != 0) != (out.layer_stage[l] == lo.pp_rank))
        fail("rank " + std::to_string(r) + " does not run the same layers as the other DP ranks of its stage");
    if (lo.first != (lo.pp_rank == 0) || lo.last != (lo.pp_rank == plan.pp - 1))
      fail("rank " + std::to_string(r) + ": pre_process must run on pipeline stage 0 and post_process on stage " +
           std::to_string(plan.pp - 1));
  }
  return out;
}

}  // namespace impl

schedule::ModelDims schedule_dims(const ModelConfig& cfg, int micro_batch, int seq_len) {
  schedule::ModelDims d;
  d.hidden = cfg.hidden;
  d.ffn_hidden = cfg.ffn_hidden;
  d.num_heads = cfg.num_heads;
  d.num_kv_heads = cfg.num_kv_heads;
  d.head_dim = cfg.head_dim;
  d.mamba_state = cfg.mamba_state_dim;
  d.mamba_head_dim = cfg.mamba_head_dim;
  d.mamba_num_heads = cfg.mamba_num_heads;
  d.mamba_groups = cfg.mamba_num_groups;
  d.conv_kernel = cfg.mamba_conv_kernel;
  // The schedule's GDN heads are the value heads, with the query/key heads beside them.
  d.gdn_num_heads = cfg.gdn_num_v_heads;
  d.gdn_head_dim = cfg.gdn_head_dim_v;
  d.gdn_key_heads = cfg.gdn_num_heads;
  d.gdn_key_head_dim = cfg.gdn_head_dim_qk;
  d.num_experts = cfg.num_experts;
  d.top_k = cfg.moe_topk;
  d.moe_ffn_hidden = cfg.moe_ffn_hidden;
  d.shared_expert_ffn = cfg.moe_shared_ffn_hidden;
  d.vocab = cfg.vocab_size;
  d.seq_len = seq_len;
  d.micro_batch = micro_batch;
  d.bytes_per_element = 4;  // the engine computes and communicates in float32
  d.q_lora_rank = std::max(1, cfg.mla_q_lora_rank);
  d.kv_lora_rank = std::max(1, cfg.mla_kv_lora_rank);
  d.window = std::max(1, cfg.window);
  d.mla_rope_head_dim = cfg.mla_qk_pos_head_dim;
  d.mla_v_head_dim = cfg.mla_v_head_dim;
  d.mla_qk_head_dim = cfg.mla_qk_head_dim;
  return d;
}
}  // namespace ht::engine::exec
