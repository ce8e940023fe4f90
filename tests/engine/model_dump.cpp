// Writes what the model-level PyTorch oracle (model_oracle.py) needs: a checkpoint of a small
// hybrid model (every engine symbol, a group, MTP with MoE), a token batch, and the engine's
// float32 losses, logits and gradients of every parameter, as safetensors.
// Usage: engine_model_dump OUT_DIR PATTERN
#include <iostream>

#include "ht/engine/checkpoint.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/pattern.hpp"

using namespace ht::engine;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: engine_model_dump OUT_DIR PATTERN\n";
    return 2;
  }
  const std::string out = argv[1];
  ModelConfig c;
  c.vocab_size = 40;
  c.hidden = 16;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.window = 3;
  c.ffn_hidden = 24;
  c.num_experts = 4;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 8;
  c.moe_shared_ffn_hidden = 8;
  c.moe_aux_loss_coeff = 0.05f;
  c.moe_z_loss_coeff = 0.01f;
  c.mamba_state_dim = 4;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 4;
  c.mamba_num_groups = 2;
  c.mamba_conv_kernel = 3;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 4;
  c.gdn_head_dim_qk = 4;
  c.gdn_head_dim_v = 4;
  c.gdn_conv_kernel = 3;
  c.mla_q_lora_rank = 8;
  c.mla_kv_lora_rank = 8;
  c.mla_qk_head_dim = 4;
  c.mla_qk_pos_head_dim = 4;
  c.mla_v_head_dim = 4;
  c.mtp_loss_scaling = 0.3f;
  c.init_std = 0.2f;
  try {
    HybridModel<float> model(ht::patterns::parse(argv[2]), c, 2024);
    Rng rng(77);
    Batch batch{Tensor<int>({2, 7}), Tensor<int>({2, 7})};
    for (auto& v : batch.tokens.data) v = rng.below(c.vocab_size);
    for (auto& v : batch.targets.data) v = rng.below(c.vocab_size);
    model.zero_grad();
    const LossBreakdown loss = model.forward(batch);
    model.backward();
    save_checkpoint(out + "/ckpt", model, nullptr, 0, 2024);

    std::vector<Tensor<float>> store;
    store.reserve(64);
    auto scalar = [&](double v) {
      store.emplace_back(std::vector<int>{1});
      store.back()[0] = static_cast<float>(v);
      return &store.back();
    };
    auto ints = [&](const Tensor<int>& t) {
      store.emplace_back(t.shape);
      for (std::size_t i = 0; i < t.size(); ++i) store.back()[i] = static_cast<float>(t[i]);
      return &store.back();
    };
    std::vector<std::pair<std::string, const Tensor<float>*>> tensors{
        {"tokens", ints(batch.tokens)},   {"targets", ints(batch.targets)},
        {"logits", &model.logits()},      {"loss.total", scalar(loss.total)},
        {"loss.lm", scalar(loss.lm)},     {"loss.aux", scalar(loss.aux)},
        {"loss.z", scalar(loss.z)}};
    for (std::size_t d = 0; d < loss.mtp.size(); ++d) {
      tensors.emplace_back("loss.mtp." + std::to_string(d), scalar(loss.mtp[d]));
      tensors.emplace_back("mtp_logits." + std::to_string(d), &model.mtp_logits(static_cast<int>(d)));
    }
    auto params = model.parameters();
    for (auto& p : params) tensors.emplace_back("grad/" + p.key, p.grad);
    write_safetensors(out + "/engine.safetensors", tensors);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
