// Parameter counts (see params.hpp). The per-symbol totals are costs.cpp's non_expert_params,
// split by what tensor parallelism shards (megatron-parallel.md 2.3, 2.4).
#include "ht/schedule/params.hpp"

#include "ht/schedule/costs.hpp"

namespace ht::schedule {

ParamSplit layer_param_split(char symbol, const ModelDims& d) {
  const double h = d.hidden, total = non_expert_params(symbol, d);
  double replicated = h;  // the layer's input norm
  switch (symbol) {
    case '*':
    case 'W': replicated += 2.0 * d.qk_norm * d.head_dim; break;
    case '+':
    case 'D':
    case 'C':
    case 'H':
      // Down-projections and the low-rank norms are replicated (TELinear "duplicated"); the
      // layer's one hidden-size norm is its input norm, counted above.
      replicated += h * d.q_lora_rank + h * (double(d.kv_lora_rank) + d.mla_rope_head_dim) + d.q_lora_rank +
                    d.kv_lora_rank;
      break;
    case 'G': replicated += d.gdn_head_dim; break;  // the output norm (dv), replicated
    case 'E': replicated += h * d.num_experts + d.shared_expert_gate * h + 2.0 * h * d.moe_latent_size; break;
    default: break;
  }
  return {total - replicated, replicated};
}

RankLayerParams rank_layer_params(const std::string& symbols, bool mtp, const ModelDims& d, const ParallelConfig& cfg) {
  RankLayerParams p;
  if (mtp) {
    // eh_proj is column-parallel; enorm, hnorm and the final norm are replicated.
    p.dense += 2.0 * d.hidden * d.hidden / cfg.tp + 3.0 * d.hidden;
    p.replicated += 3.0 * d.hidden;
  }
  for (char s : symbols) {
    const ParamSplit split = layer_param_split(s, d);
    p.dense += split.tp_split / cfg.tp + split.replicated;
    if ((s == '*' || s == 'W') && d.num_kv_heads < cfg.tp)  // one KV group per rank, not kv / tp
      p.dense += 2.0 * d.hidden * d.head_dim * (1.0 - double(d.num_kv_heads) / cfg.tp);
    p.replicated += split.replicated;
    if (s == 'E') p.expert += double(d.num_experts / cfg.ep) * expert_params_per_expert(d) / cfg.etp;
  }
  return p;
}

ModelParams count_params(const patterns::ParsedPattern& pattern, const ModelDims& d) {
  ModelParams p;
  p.embedding = embedding_params(d);
  p.output = output_params(d) - (d.tied_embeddings ? embedding_params(d) : 0.0);
  const double per_expert = expert_params_per_expert(d);
  // (all weights, weights a token uses, routed expert weights) of a run of layer symbols.
  struct Sum {
    double all = 0, active = 0, experts = 0;
  };
  auto sum = [&](const std::string& symbols) {
    Sum s;
    for (char c : symbols) {
      const double dense = non_expert_params(c, d);
      s.all += dense;
      s.active += dense;
      if (c == 'E') {
        s.experts += d.num_experts * per_expert;
        s.all += d.num_experts * per_expert;
        s.active += d.top_k * per_expert;
      }
    }
    return s;
  };
  const Sum main = sum(pattern.flattened_symbols());
  const Sum depth = sum(pattern.mtp);
  p.experts = main.experts;
  const int weight_sets = d.mtp_shared_weights && pattern.mtp_depths > 0 ? 1 : pattern.mtp_depths;
  p.mtp = weight_sets * (mtp_extra_params(d) + depth.all);
  p.mtp_active = weight_sets * (mtp_extra_params(d) + depth.active);
  p.total = p.embedding + p.output + main.all + p.mtp;
  p.active = p.embedding + p.output + main.active + p.mtp_active;
  return p;
}

}  // namespace ht::schedule
