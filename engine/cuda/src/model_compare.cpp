// compare_models (device_executor.hpp): whole hybrid models on one rank of a device -- grouped
// against flattened on the device, and the device against the CPU HybridModel with a float64
// HybridModel holding the same weights as the oracle (the bound of layer_compare.hpp, K the
// model's summation depth). Device-agnostic: the factory decides whether the GPU or the host
// emulation runs.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/patterns/pattern.hpp"

namespace ht::engine::cuda {

ModelConfig model_check_config() {
  ModelConfig c;
  c.vocab_size = 37;
  c.hidden = 24;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;
  c.window = 3;
  c.ffn_hidden = 20;
  c.num_experts = 4;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 12;
  c.moe_shared_ffn_hidden = 8;
  c.moe_aux_loss_coeff = 0.1f;
  c.moe_z_loss_coeff = 0.05f;
  c.mamba_state_dim = 6;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 4;
  c.mamba_num_groups = 2;
  c.mamba_conv_kernel = 3;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 4;
  c.gdn_head_dim_qk = 6;
  c.gdn_head_dim_v = 4;
  c.gdn_conv_kernel = 3;
  c.mla_q_lora_rank = 10;
  c.mla_kv_lora_rank = 8;
  c.mla_qk_head_dim = 4;
  c.mla_qk_pos_head_dim = 2;
  c.mla_v_head_dim = 4;
  c.init_std = 0.2f;
  return c;
}

namespace {

Batch random_batch(int b, int t, int vocab, std::uint64_t seed) {
  Rng rng(seed, "compare-models-batch");
  Batch batch{Tensor<int>({b, t}), Tensor<int>({b, t})};
  for (auto& v : batch.tokens.data) v = rng.below(vocab);
  for (auto& v : batch.targets.data) v = rng.below(vocab);
  return batch;
}

// The loss then every gradient by canonical name (the map's order), as one vector.
template <class T>
std::vector<double> flatten(double loss, const std::vector<ParamRef<T>>& params) {
  std::vector<double> out{loss};
  std::map<std::string, const Tensor<T>*> by_name;
  for (auto& p : params) by_name[p.canonical] = p.grad;
  for (const auto& [name, g] : by_name) out.insert(out.end(), g->data.begin(), g->data.end());
  return out;
}

// One forward and backward of `batch` on one rank of the device (the one-rank sequential plan).
std::vector<double> on_device(const DeviceExecutorFactory& make, const patterns::ParsedPattern& p,
                              const ModelConfig& cfg, std::uint64_t seed, const Batch& batch) {
  auto ex = make(p, cfg, seed, exec::ep_plan(p, cfg, batch.tokens.dim(0), batch.tokens.dim(1), 1, 1, false, false), {});
  ex->zero_grad();
  const double loss = ex->step({{batch}}).total;
  return flatten(loss, ex->parameters(0));
}

template <class T>
std::vector<double> on_cpu(HybridModel<T>& m, const Batch& batch) {
  m.zero_grad();
  const LossBreakdown loss = m.forward(batch);
  m.backward();
  return flatten(loss.total, m.parameters());
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    d = std::isnan(e) ? INFINITY : std::max(d, e);
  }
  return d;
}

}  // namespace

ModelComparison compare_device_to_cpu(const DeviceExecutorFactory& make, const patterns::ParsedPattern& p,
                                      const ModelConfig& cfg, const Batch& batch, std::uint64_t seed) {
  HybridModel<float> cpu(p, cfg, seed);
  HybridModel<double> ref(p, cfg, seed);
  auto fp = cpu.parameters();
  auto dp = ref.parameters();
  for (std::size_t i = 0; i < fp.size(); ++i) dp[i].value->data.assign(fp[i].value->data.begin(), fp[i].value->data.end());
  const auto r64 = on_cpu(ref, batch), r32 = on_cpu(cpu, batch), dev = on_device(make, p, cfg, seed, batch);
  // K: every physical layer adds at most C + F + E F + T reductions along the chain, the head V.
  const int layers = static_cast<int>(p.flattened_symbols().size() + p.mtp_items.size() * p.mtp_depths);
  const int depth = (layers + 2) * (cfg.hidden + cfg.ffn_hidden + cfg.num_experts * cfg.moe_ffn_hidden +
                                    batch.tokens.dim(1) + cfg.vocab_size);
  std::vector<LayerComparison> bound;
  dev::compare::Run<dev::Host, float>{bound}.add("model", p.text, depth, r64, r32, dev);
  const LayerComparison& c = bound.front();
  std::ostringstream note;
  note.precision(3);
  note << "losses and gradients: err vs float64 " << c.err_dev << (c.pass ? " <= " : " > ") << "bound " << c.bound
       << " (CPU float32 err " << c.err_ref << ", K " << depth << ", scale " << c.scale << ")";
  return {"cpu_vs_device_model", p.text, c.diff_cpu, c.diff_cpu == 0, c.pass, note.str()};
}

std::vector<ModelComparison> compare_models(const DeviceExecutorFactory& make, std::uint64_t seed) {
  const ModelConfig cfg = model_check_config();
  const Batch batch = random_batch(2, 8, cfg.vocab_size, seed);
  std::vector<ModelComparison> rows;

  const std::vector<std::pair<std::string, std::string>> pairs{
      {"M[*E]M[*E]-", "M*EM*E-"}, {"[WE]E/WE", "WEE/WE"}, {"-[*-]/*-/*-", "-*-/*-/*-"}, {"[MG]+[G-]", "MG+G-"}};
  for (const auto& [grouped, flat] : pairs) {
    const double d = max_abs_diff(on_device(make, patterns::parse(grouped), cfg, seed, batch),
                                  on_device(make, patterns::parse(flat), cfg, seed, batch));
    rows.push_back({"device_grouped_vs_flattened", grouped + " vs " + flat, d, d == 0, d == 0,
                    "losses and every gradient by canonical name, one microbatch, bitwise required"});
  }

  for (const std::string text : {"M[*E]-/*E", "[WE]M-", "G+E/+E", "MG*G"})
    rows.push_back(compare_device_to_cpu(make, patterns::parse(text), cfg, batch, seed));
  return rows;
}

}  // namespace ht::engine::cuda
