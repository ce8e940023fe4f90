// Closed-form costs of plan nodes (conventions in costs.hpp). Every helper adds its flops and
// bytes to a SlotWork and the kernel that does them to its kernel list, so the node totals and
// the kernel model cannot drift apart.
#include "ht/schedule/costs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

// A GEMM (tokens x k) * (k x n) with its weight; its weight gradient is delayable unless `fixed`
// (router, output layer).
void gemm(SlotWork& w, double tokens, double k, double n, double bytes, bool fixed = false) {
  const double flops = 2 * tokens * k * n;
  (fixed ? w.other_flops : w.weight_gemm_flops) += flops;
  w.weight_bytes += k * n * bytes;
  w.activation_bytes += tokens * (k + n) * bytes;
  w.kernels.push_back({KernelKind::Gemm, !fixed, tokens, n, k, 1, flops, (k * n + tokens * (k + n)) * bytes});
}

void fixed_gemm(SlotWork& w, double tokens, double k, double n, double bytes) { gemm(w, tokens, k, n, bytes, true); }

// Memory-bound work: `flops` operations over `bytes` of traffic (norms, activations, softmax).
void elementwise(SlotWork& w, double flops, double bytes) {
  w.other_flops += flops;
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, flops, bytes});
}

void scan(SlotWork& w, double flops, double bytes) {
  w.other_flops += flops;
  w.kernels.push_back({KernelKind::Scan, false, 0, 0, 0, 1, flops, bytes});
}

// Causal average of keys per query, or the key budget of sparse / windowed variants.
double attended_keys(char symbol, const ModelDims& d) {
  const double causal = (double(d.seq_len) + 1) / 2;
  switch (symbol) {
    case 'W':
    case 'D': return std::min(double(d.window), causal);
    case 'C': return causal / 4;
    case 'H': return causal / 128;
    default: return causal;
  }
}

// Fused attention over `tokens` queries of `q_heads` heads: scores of width qk_dim, values of
// width v_dim (both head_dim for standard attention).
void attention_core(SlotWork& w, char symbol, const ModelDims& d, double tokens, double q_heads,
                    double kv_heads, double qk_dim, double v_dim) {
  const double b = d.bytes_per_element;
  const double keys = attended_keys(symbol, d);
  const double flops = 2 * tokens * keys * q_heads * qk_dim + 2 * tokens * keys * q_heads * v_dim;
  const double bytes = tokens * (q_heads * qk_dim + kv_heads * qk_dim + kv_heads * v_dim + q_heads * v_dim) * b;
  w.other_flops += flops;
  w.activation_bytes += bytes;
  w.kernels.push_back({KernelKind::Attention, false, tokens, keys, qk_dim, 1, flops, bytes});
}

// Key/value heads one TP rank holds: g / tp, or one replicated head when g < tp (TE is told
// g = tp, megatron-parallel.md 2.3).
double kv_heads_per_rank(const ModelDims& d, int tp) {
  return d.num_kv_heads >= tp ? double(d.num_kv_heads) / tp : 1.0;
}

}  // namespace

Shard shard_of(const ParallelConfig& c) { return {c.tp, c.cp, c.etp}; }

SlotWork& SlotWork::operator+=(const SlotWork& o) {
  weight_gemm_flops += o.weight_gemm_flops;
  other_flops += o.other_flops;
  weight_bytes += o.weight_bytes;
  activation_bytes += o.activation_bytes;
  kernels.insert(kernels.end(), o.kernels.begin(), o.kernels.end());
  return *this;
}

NodeCost phase_cost(const SlotWork& w, Phase phase, bool delay_wgrad) {
  const double mem = w.weight_bytes + w.activation_bytes;
  switch (phase) {
    case Phase::Forward:
    case Phase::Recompute: return {w.weight_gemm_flops + w.other_flops, mem};
    case Phase::Backward:
      if (delay_wgrad) return {w.weight_gemm_flops + 2 * w.other_flops, mem};
      return {2 * (w.weight_gemm_flops + w.other_flops), 2 * mem};
    case Phase::Weight: return {w.weight_gemm_flops, mem};
  }
  return {};
}

double shard_tokens(const ModelDims& d, const Shard& s) { return d.tokens() / s.cp; }
double owned_tokens(const ModelDims& d, const Shard& s) { return d.tokens() / (double(s.cp) * s.tp); }

SlotWork symbol_work(char symbol, const ModelDims& d, const Shard& sh) {
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden, tp = sh.tp;
  SlotWork w;
  switch (symbol) {
    case '*':
    case 'W': {
      const double heads = d.num_heads / tp, kv_heads = kv_heads_per_rank(d, sh.tp);
      const double q = heads * d.head_dim, kv = kv_heads * d.head_dim;
      gemm(w, t, h, q * (1 + d.attn_output_gate) + 2 * kv, b);  // q (and its gate), k, v
      if (d.qk_norm) elementwise(w, 4 * t * (q + kv), 2 * t * (q + kv) * b);
      attention_core(w, symbol, d, t, heads, kv_heads, d.head_dim, d.head_dim);
      if (d.attn_output_gate) elementwise(w, 2 * t * q, 3 * t * q * b);
      gemm(w, t, q, h, b);
      break;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      // Down-projections have replicated weights and run on the owned tokens (SP), the
      // up-projections and the output projection are TP-split on the gathered tokens.
      const double owned = owned_tokens(d, sh), heads = d.num_heads / tp;
      const double qk = d.head_dim + d.mla_rope_head_dim, v = d.mla_v_dim();
      gemm(w, owned, h, d.q_lora_rank, b);
      gemm(w, t, d.q_lora_rank, heads * qk, b);
      gemm(w, owned, h, double(d.kv_lora_rank) + d.mla_rope_head_dim, b);
      gemm(w, t, d.kv_lora_rank, heads * (double(d.head_dim) + v), b);
      attention_core(w, symbol, d, t, heads, heads, qk, v);
      gemm(w, t, heads * v, h, b);
      break;
    }
    case 'M': {
      const double inner = double(d.mamba_num_heads) * d.mamba_head_dim / tp;
      const double bc = 2.0 * d.mamba_groups * d.mamba_state / tp;
      const double heads = d.mamba_num_heads / tp;
      gemm(w, t, h, 2 * inner + bc + heads, b);  // z, x, B, C, dt
      scan(w, 2 * t * (inner + bc) * d.conv_kernel, 2 * t * (inner + bc) * b);
      scan(w, 6 * t * inner * d.mamba_state, t * (2 * inner + bc + heads) * b);
      elementwise(w, 5 * t * inner, 3 * t * inner * b);  // gated RMSNorm
      w.activation_bytes += t * (2 * (inner + bc) + inner + heads + 2 * inner) * b;
      gemm(w, t, inner, h, b);
      break;
    }
    case 'G': {
      const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim() / tp;
      const double v = double(d.gdn_num_heads) * d.gdn_head_dim / tp;
      const double heads = d.gdn_num_heads / tp;
      gemm(w, t, h, 2 * qk + 2 * v + 2 * heads, b);  // q, k, v, z, beta, alpha
      scan(w, 2 * t * (2 * qk + v) * d.conv_kernel, 2 * t * (2 * qk + v) * b);
      scan(w, 6 * t * heads * double(d.gdn_qk_head_dim()) * d.gdn_head_dim, t * (2 * qk + 2 * v + 2 * heads) * b);
      elementwise(w, 5 * t * v, 3 * t * v * b);  // gated RMSNorm
      w.activation_bytes += t * (2 * (2 * qk + v) + 4 * v) * b;
      gemm(w, t, v, h, b);
      break;
    }
    case '-': {
      const double f = d.ffn_hidden / tp;
      gemm(w, t, h, (d.ffn_matrices() - 1) * f, b);  // gate and up (SwiGLU), or up
      elementwise(w, 3 * t * f, 3 * t * f * b);
      gemm(w, t, f, h, b);
      break;
    }
    default:
      throw ScheduleError(ErrorCode::BadConfig,
                          "no cost model for layer symbol '" + std::string(1, symbol) + "'");
  }
  return w;
}

SlotWork moe_router_work(const ModelDims& d, const Shard& sh) {
  const double t = owned_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  elementwise(w, 4 * t * h, 0);  // pre-MLP RMSNorm
  w.activation_bytes += 2 * t * h * b;
  w.kernels.back().bytes = 2 * t * h * b;
  fixed_gemm(w, t, h, d.num_experts, b);
  elementwise(w, 3 * t * d.num_experts, 2 * t * d.num_experts * 4.0);  // softmax + top-k (fp32)
  if (d.shared_expert_gate) fixed_gemm(w, t, h, 1, b);
  if (d.moe_latent_size > 0) {  // h -> latent before the dispatch, latent -> h after the combine
    gemm(w, t, h, d.moe_latent_size, b);
    gemm(w, t, d.moe_latent_size, h, b);
  }
  return w;
}

SlotWork shared_expert_work(const ModelDims& d, const Shard& sh) {
  SlotWork w;
  if (d.shared_expert_ffn <= 0) return w;
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  const double f = double(d.shared_expert_ffn) / sh.tp;
  gemm(w, t, h, (d.ffn_matrices() - 1) * f, b);
  elementwise(w, 3 * t * f, 3 * t * f * b);
  gemm(w, t, f, h, b);
  return w;
}

SlotWork moe_preprocess_work(const ModelDims& d, const Shard& sh) {
  SlotWork w = moe_router_work(d, sh);
  w += shared_expert_work(d, sh);
  return w;
}

SlotWork expert_work(const ModelDims& d, double copies, int local_experts, const Shard& sh) {
  const double b = d.bytes_per_element, h = d.moe_width();
  const double f = double(d.moe_ffn_hidden) / sh.etp;
  const double x = d.ffn_matrices();
  SlotWork w;
  // Every local expert's weights are read once however many token copies it gets.
  w.weight_gemm_flops = 2 * x * copies * h * f;
  w.weight_bytes = local_experts * expert_params_per_expert(d) / sh.etp * b;
  w.other_flops = 3 * copies * f;
  w.activation_bytes = copies * (2 * h + 3.0 * f) * b;
  const double groups = std::max(1, local_experts), rows = copies / groups;
  auto grouped = [&](double k, double n) {
    const double flops = 2 * copies * k * n;
    w.kernels.push_back({KernelKind::GroupedGemm, true, rows, n, k, groups, flops,
                         (groups * k * n + copies * (k + n)) * b});
  };
  grouped(h, (x - 1) * f);
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, w.other_flops, 3 * copies * f * b});
  grouped(f, h);
  return w;
}

SlotWork mtp_pre_work(const ModelDims& d, const Shard& sh) {
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  elementwise(w, 2 * 4 * owned_tokens(d, sh) * h, 4 * owned_tokens(d, sh) * h * b);  // enorm, hnorm
  w.weight_bytes += t * h * b;  // embedding rows
  w.activation_bytes += 2 * t * h * b;
  gemm(w, t, 2 * h, h / sh.tp, b);  // eh_proj
  return w;
}

SlotWork mtp_post_work(const ModelDims& d, const Shard& sh) {
  const double t = owned_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  elementwise(w, 4 * t * h, 2 * t * h * b);
  w.weight_bytes = h * b;
  w.activation_bytes = 2 * t * h * b;
  return w;
}

SlotWork embedding_work(const ModelDims& d, const Shard& sh) {
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  w.weight_bytes = t * h * b;  // the gathered rows
  w.activation_bytes = t * h * b;
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, 0, 2 * t * h * b});
  return w;
}

SlotWork output_work(const ModelDims& d, const Shard& sh) {
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  const double vocab = double(d.vocab) / sh.tp;
  SlotWork w = mtp_post_work(d, sh);  // final norm
  fixed_gemm(w, t, h, vocab, b);
  elementwise(w, 5 * t * vocab, t * vocab * 4.0 * 2);
  w.activation_bytes += t * vocab * 4.0;  // fp32 logits for the loss
  return w;
}

SlotWork slot_work(const LayerShape& shape, Slot slot, const ModelDims& d, int ep, int ep_rank,
                   double routing_skew, const Shard& sh) {
  SlotWork w;
  if (!shape.has_slot(slot)) return w;
  switch (slot) {
    case Slot::PreDispatch:
      if (shape.mtp) w += mtp_pre_work(d, sh);
      for (char c : shape.pre) w += symbol_work(c, d, sh);
      if (shape.moe()) w += moe_preprocess_work(d, sh);
      break;
    case Slot::Mlp:
      if (shape.terminal == '-') w += symbol_work('-', d, sh);
      if (shape.moe())
        w += expert_work(d, routed_copies(d, ep, ep_rank, routing_skew, sh), d.num_experts / ep, sh);
      break;
    case Slot::MtpPost: w += mtp_post_work(d, sh); break;
    default: break;
  }
  return w;
}

std::vector<double> routing_shares(int ep, double routing_skew) {
  std::vector<double> shares(static_cast<std::size_t>(std::max(ep, 1)));
  double total = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    shares[i] = routing_skew == 0 ? 1.0 : std::pow(double(i + 1), -routing_skew);
    total += shares[i];
  }
  for (double& s : shares) s /= total;
  return shares;
}

namespace {
// The shares of the last (ep, skew) asked for: the builder asks for one share per peer of every
// all-to-all node, and recomputing all ep of them each time made a plan O(ep^2) per node.
const std::vector<double>& cached_shares(int ep, double routing_skew) {
  thread_local int cached_ep = -1;
  thread_local double cached_skew = -1;
  thread_local std::vector<double> shares;
  if (ep != cached_ep || routing_skew != cached_skew) {
    shares = routing_shares(ep, routing_skew);
    cached_ep = ep;
    cached_skew = routing_skew;
  }
  return shares;
}
}  // namespace

double routed_payload_bytes(const ModelDims& d, const Shard& sh) {
  return owned_tokens(d, sh) * d.top_k * double(d.moe_width()) * d.bytes_per_element;
}

double routed_copies(const ModelDims& d, int ep, int ep_rank, double routing_skew, const Shard& sh) {
  return ep * owned_tokens(d, sh) * d.top_k *
         cached_shares(ep, routing_skew)[static_cast<std::size_t>(ep_rank)] * sh.etp;
}

double a2a_bytes(const ModelDims& d, int ep, double routing_skew, Slot slot, Phase phase, int from,
                 int to, const Shard& sh) {
  const auto& shares = cached_shares(ep, routing_skew);
  const bool toward_experts = (slot == Slot::Dispatch) == (phase != Phase::Backward);
  const int owner_share_index = toward_experts ? to : from;
  return routed_payload_bytes(d, sh) * shares[static_cast<std::size_t>(owner_share_index)];
}

double pipe_bytes(const ModelDims& d, const Shard& sh) {
  return owned_tokens(d, sh) * double(d.hidden) * d.bytes_per_element;
}

double non_expert_params(char symbol, const ModelDims& d) {
  const double h = d.hidden;
  switch (symbol) {
    case '*':
    case 'W': {
      const double q = double(d.num_heads) * d.head_dim, kv = double(d.num_kv_heads) * d.head_dim;
      return h * (q * (1 + d.attn_output_gate) + 2 * kv) + q * h + h + 2.0 * d.qk_norm * d.head_dim;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      const double a = d.num_heads, qk = double(d.head_dim) + d.mla_rope_head_dim, v = d.mla_v_dim();
      return h * d.q_lora_rank + d.q_lora_rank * a * qk + h * (double(d.kv_lora_rank) + d.mla_rope_head_dim) +
             d.kv_lora_rank * a * (double(d.head_dim) + v) + a * v * h + 2 * h + d.q_lora_rank + d.kv_lora_rank;
    }
    case 'M': {
      const double inner = double(d.mamba_num_heads) * d.mamba_head_dim;
      const double bc = 2.0 * d.mamba_groups * d.mamba_state;
      // The depthwise conv1d has a bias (megatron-parallel.md 8.1: (di + 2Gn)(K + 1)).
      return h * (2 * inner + bc + d.mamba_num_heads) + (inner + bc) * (d.conv_kernel + 1.0) +
             3.0 * d.mamba_num_heads + inner + inner * h + h;
    }
    case 'G': {
      const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim();
      const double v = double(d.gdn_num_heads) * d.gdn_head_dim;
      // The output norm is one value head wide, shared by the heads (megatron-parallel.md 2.3).
      return h * (2 * qk + 2 * v + 2.0 * d.gdn_num_heads) + (2 * qk + v) * d.conv_kernel +
             2.0 * d.gdn_num_heads + d.gdn_head_dim + v * h + h;
    }
    case '-': return d.ffn_matrices() * h * d.ffn_hidden + h;
    case 'E':
      return h + h * d.num_experts + d.ffn_matrices() * h * d.shared_expert_ffn + d.shared_expert_gate * h +
             2.0 * h * d.moe_latent_size;
    default:
      throw ScheduleError(ErrorCode::BadConfig,
                          "no parameter count for layer symbol '" + std::string(1, symbol) + "'");
  }
}

double expert_params_per_expert(const ModelDims& d) {
  return double(d.ffn_matrices()) * d.moe_width() * d.moe_ffn_hidden;
}
double embedding_params(const ModelDims& d) { return double(d.vocab) * d.hidden; }
double output_params(const ModelDims& d) { return double(d.vocab) * d.hidden + d.hidden; }
double mtp_extra_params(const ModelDims& d) { return 2.0 * d.hidden * d.hidden + 3.0 * d.hidden; }

}  // namespace ht::schedule
