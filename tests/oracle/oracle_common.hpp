// Shared by the two C++ halves of the PyTorch oracle (oracle_dump: one layer at a time;
// oracle_model_dump: whole models): the oracle's model configuration, its JSON form for the
// Python side, and running the Python side (exit 77, ctest's SKIP, where torch is absent).
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "ht/engine/config.hpp"

namespace ht::oracle {

using engine::ModelConfig;

inline std::string config_json(const ModelConfig& c) {
  nlohmann::json j = {{"vocab_size", c.vocab_size},
                      {"hidden", c.hidden},
                      {"norm_eps", c.norm_eps},
                      {"num_heads", c.num_heads},
                      {"num_kv_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim},
                      {"rope", c.rope},
                      {"rope_theta", c.rope_theta},
                      {"window", c.window},
                      {"ffn_hidden", c.ffn_hidden},
                      {"num_experts", c.num_experts},
                      {"moe_topk", c.moe_topk},
                      {"moe_ffn_hidden", c.moe_ffn_hidden},
                      {"moe_shared_ffn_hidden", c.moe_shared_ffn_hidden},
                      {"moe_aux_loss_coeff", c.moe_aux_loss_coeff},
                      {"moe_z_loss_coeff", c.moe_z_loss_coeff},
                      {"mamba_state_dim", c.mamba_state_dim},
                      {"mamba_head_dim", c.mamba_head_dim},
                      {"mamba_num_heads", c.mamba_num_heads},
                      {"mamba_num_groups", c.mamba_num_groups},
                      {"mamba_conv_kernel", c.mamba_conv_kernel},
                      {"gdn_num_heads", c.gdn_num_heads},
                      {"gdn_num_v_heads", c.gdn_num_v_heads},
                      {"gdn_head_dim_qk", c.gdn_head_dim_qk},
                      {"gdn_head_dim_v", c.gdn_head_dim_v},
                      {"gdn_conv_kernel", c.gdn_conv_kernel},
                      {"mla_q_lora_rank", c.mla_q_lora_rank},
                      {"mla_kv_lora_rank", c.mla_kv_lora_rank},
                      {"mla_qk_head_dim", c.mla_qk_head_dim},
                      {"mla_qk_pos_head_dim", c.mla_qk_pos_head_dim},
                      {"mla_v_head_dim", c.mla_v_head_dim},
                      {"mtp_loss_scaling", c.mtp_loss_scaling}};
  return j.dump();
}

inline ModelConfig oracle_config() {
  ModelConfig c;
  c.vocab_size = 11;
  c.hidden = 8;
  c.init_std = 0.5f;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.rope = true;
  c.window = 3;
  c.ffn_hidden = 12;
  c.num_experts = 4;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 6;
  c.moe_shared_ffn_hidden = 5;
  c.mamba_state_dim = 4;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 4;
  c.mamba_num_groups = 2;
  c.mamba_conv_kernel = 4;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 4;
  c.gdn_head_dim_qk = 4;
  c.gdn_head_dim_v = 3;
  c.gdn_conv_kernel = 4;
  c.mla_q_lora_rank = 6;
  c.mla_kv_lora_rank = 5;
  c.mla_qk_head_dim = 4;
  c.mla_qk_pos_head_dim = 4;
  c.mla_v_head_dim = 3;
  return c;
}

// Runs `python script dir [extra...]`; 77 when python cannot import torch.
inline int run_oracle(const std::string& python, const std::string& script, const std::filesystem::path& dir,
                      const std::string& extra = "") {
  const std::string probe = "\"" + python + "\" -c \"import torch\" > /dev/null 2>&1";
  const int rc = std::system(probe.c_str());
  if (rc != 0) {
    std::cout << "SKIP: " << python << " cannot import torch; the PyTorch oracle did not run\n";
    return 77;
  }
  const std::string cmd = "\"" + python + "\" \"" + script + "\" \"" + dir.string() + "\"" + extra;
  const int status = std::system(cmd.c_str());
  if (status == -1 || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

}  // namespace ht::oracle
