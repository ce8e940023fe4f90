// Model dimensions shared by every layer of the engine: one value type read by the model builder,
// each layer's init/forward/backward, the checkpoint manifest and the CLI. Layers take
// `const ModelConfig&` and read the fields they need, so adding a layer adds fields here, not
// new plumbing.
#pragma once

#include <cstdint>

namespace ht::engine {

struct ModelConfig {
  // Trunk
  int vocab_size = 256;  // byte-level tokens by default
  int hidden = 64;       // C
  float norm_eps = 1e-5f;
  float init_std = 0.02f;

  // Attention '*' and 'W' (GQA: num_heads a multiple of num_kv_heads)
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 16;          // qkv projection width per head (independent of hidden)
  bool rope = true;           // rotary embedding on q and k (rotate-half form, positions 0..T-1)
  float rope_theta = 10000.f;
  int window = 16;            // 'W': a query attends to keys t-window+1 .. t

  // Dense MLP '-' (SwiGLU)
  int ffn_hidden = 128;

  // MoE 'E'
  int num_experts = 4;
  int moe_topk = 2;
  int moe_ffn_hidden = 64;        // per-expert SwiGLU width
  int moe_shared_ffn_hidden = 0;  // shared expert width; 0 = no shared expert
  float moe_aux_loss_coeff = 1e-2f;
  float moe_z_loss_coeff = 1e-3f;

  // Mamba2 'M' (layers written by the mixer engineer; fields read by their code)
  int mamba_state_dim = 16;   // d_state (N)
  int mamba_head_dim = 16;    // P
  int mamba_num_heads = 8;    // H; d_inner = H * P
  int mamba_num_groups = 1;   // B/C groups
  int mamba_conv_kernel = 4;

  // Gated DeltaNet 'G'
  int gdn_num_heads = 4;       // q/k heads
  int gdn_num_v_heads = 4;     // v heads (multiple of gdn_num_heads)
  int gdn_head_dim_qk = 16;
  int gdn_head_dim_v = 16;
  int gdn_conv_kernel = 4;

  // MLA '+'
  int mla_q_lora_rank = 32;   // 0 = no low-rank q
  int mla_kv_lora_rank = 32;
  int mla_qk_head_dim = 16;   // the non-rotary part
  int mla_qk_pos_head_dim = 8;
  int mla_v_head_dim = 16;

  // MTP
  float mtp_loss_scaling = 0.1f;  // mtp_loss_scaling_factor; depth losses get factor / depths

  bool operator==(const ModelConfig&) const = default;
};

}  // namespace ht::engine
