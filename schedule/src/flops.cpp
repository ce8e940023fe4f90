// Model FLOPs (see flops.hpp; the terms are megatron-parallel.md 7.1 and 7.2).
#include "ht/schedule/flops.hpp"

#include <algorithm>
#include <string>

#include "ht/schedule/error.hpp"

namespace ht::schedule {

double forward_flops(char symbol, const ModelDims& d, double nt) {
  const double h = d.hidden, s = d.seq_len;
  switch (symbol) {
    case '*':
    case 'W': {
      const double q = double(d.num_heads) * d.head_dim, kv = double(d.num_kv_heads) * d.head_dim;
      // Projections 4 N h (q + kv) (q, k, v and the output); scores and values over the causal
      // half of the sequence: 2 N s q, or 4 N w q over a window w.
      const double keys = symbol == 'W' ? std::min(double(d.window), s / 2) : s / 2;
      return 4 * nt * h * (q + kv) + 4 * nt * keys * q;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      // The GPT path's MLA term: multiply-accumulates per token of the projections, 2 N each,
      // and the core 2 x (d_qk + d_r + d_v) a N keys.
      const double a = d.num_heads, qk = d.mla_qk_dim(), r = d.mla_rope_head_dim, v = d.mla_v_dim();
      const double ql = d.q_lora_rank, kl = d.kv_lora_rank;
      const double macs = ql * (h + a * (qk + r) + 1) + kl * (h + a * (qk + v) + 1) + h * r + a * v * h;
      double keys = s / 2;
      if (symbol == 'D') keys = std::min(double(d.window), s / 2);
      if (symbol == 'C') keys = s / 8;
      if (symbol == 'H') keys = s / 256;
      return 2 * nt * macs + 2 * nt * keys * a * (qk + r + v);
    }
    case 'M': {
      const double di = double(d.mamba_num_heads) * d.mamba_head_dim;
      const double gn = double(d.mamba_groups) * d.mamba_state;
      return 2 * nt * h * (2 * di + 2 * gn + d.mamba_num_heads) + 7 * nt * di * d.mamba_state + 2 * nt * di * h;
    }
    case 'G': {
      const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim();
      const double v = double(d.gdn_num_heads) * d.gdn_head_dim;
      const double proj = 2 * qk + 2 * v + 2.0 * d.gdn_num_heads;
      return 2 * nt * (h * proj + d.conv_kernel * (2 * qk + v) + 4.0 * d.gdn_num_heads * d.gdn_head_dim * d.gdn_head_dim + h * v);
    }
    case '-': return 2.0 * d.ffn_matrices() * nt * h * d.ffn_hidden;
    case 'E': {
      const double x = d.ffn_matrices();
      const double routed = 2 * x * nt * d.moe_width() * double(d.moe_ffn_hidden) * d.top_k;
      const double latent = d.moe_latent_size > 0 ? 4 * nt * h * d.moe_latent_size : 0;
      return routed + latent + 2 * x * nt * h * d.shared_expert_ffn;
    }
    default:
      throw ScheduleError(ErrorCode::BadConfig, "no FLOP count for layer symbol '" + std::string(1, symbol) + "'");
  }
}

double model_flops_per_step(const patterns::ParsedPattern& pattern, const ModelDims& d, double global_batch) {
  const double nt = global_batch * d.seq_len;
  double forward = 0;
  for (char c : pattern.flattened_symbols()) forward += forward_flops(c, d, nt);
  for (int depth = 0; depth < pattern.mtp_depths; ++depth)
    for (char c : pattern.mtp) forward += forward_flops(c, d, nt);
  forward += 2 * nt * double(d.hidden) * d.vocab * (1 + pattern.mtp_depths);
  return 3 * forward;
}

}  // namespace ht::schedule
