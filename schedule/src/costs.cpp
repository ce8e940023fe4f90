// Closed-form costs of plan nodes (conventions in costs.hpp).
#include "ht/schedule/costs.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

// A GEMM (T x K) * (K x N) with its weight (delayable weight gradient).
void gemm(SlotWork& w, double tokens, double k, double n, double bytes) {
  w.weight_gemm_flops += 2 * tokens * k * n;
  w.weight_bytes += k * n * bytes;
  w.activation_bytes += tokens * (k + n) * bytes;
}

// A GEMM whose weight gradient is never delayed (router, output layer).
void fixed_gemm(SlotWork& w, double tokens, double k, double n, double bytes) {
  w.other_flops += 2 * tokens * k * n;
  w.weight_bytes += k * n * bytes;
  w.activation_bytes += tokens * (k + n) * bytes;
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

void attention_core(SlotWork& w, char symbol, const ModelDims& d, double q_heads, double kv_heads) {
  const double t = d.tokens(), b = d.bytes_per_element;
  w.other_flops += 4 * t * attended_keys(symbol, d) * q_heads * d.head_dim;
  w.activation_bytes += t * (q_heads + 2 * kv_heads + q_heads) * d.head_dim * b;
}

}  // namespace

SlotWork& SlotWork::operator+=(const SlotWork& o) {
  weight_gemm_flops += o.weight_gemm_flops;
  other_flops += o.other_flops;
  weight_bytes += o.weight_bytes;
  activation_bytes += o.activation_bytes;
  return *this;
}

NodeCost phase_cost(const SlotWork& w, Phase phase, bool delay_wgrad) {
  const double mem = w.weight_bytes + w.activation_bytes;
  switch (phase) {
    case Phase::Forward: return {w.weight_gemm_flops + w.other_flops, mem};
    case Phase::Backward:
      if (delay_wgrad) return {w.weight_gemm_flops + 2 * w.other_flops, mem};
      return {2 * (w.weight_gemm_flops + w.other_flops), 2 * mem};
    case Phase::Weight: return {w.weight_gemm_flops, mem};
  }
  return {};
}

SlotWork symbol_work(char symbol, const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  switch (symbol) {
    case '*':
    case 'W': {
      const double q = double(d.num_heads) * d.head_dim, kv = double(d.num_kv_heads) * d.head_dim;
      gemm(w, t, h, q + 2 * kv, b);
      attention_core(w, symbol, d, d.num_heads, d.num_kv_heads);
      gemm(w, t, q, h, b);
      break;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      const double q = double(d.num_heads) * d.head_dim;
      gemm(w, t, h, d.q_lora_rank, b);
      gemm(w, t, d.q_lora_rank, q, b);
      gemm(w, t, h, d.kv_lora_rank, b);
      gemm(w, t, d.kv_lora_rank, 2 * q, b);
      attention_core(w, symbol, d, d.num_heads, d.num_heads);
      gemm(w, t, q, h, b);
      break;
    }
    case 'M': {
      const double inner = double(d.mamba_num_heads) * d.mamba_head_dim;
      const double bc = 2.0 * d.mamba_groups * d.mamba_state;
      gemm(w, t, h, 2 * inner + bc + d.mamba_num_heads, b);  // z, x, B, C, dt
      w.other_flops += 2 * t * (inner + bc) * d.conv_kernel;
      w.other_flops += 6 * t * inner * d.mamba_state;
      w.other_flops += 5 * t * inner;  // gated RMSNorm
      w.activation_bytes += t * (2 * (inner + bc) + inner + d.mamba_num_heads + 2 * inner) * b;
      gemm(w, t, inner, h, b);
      break;
    }
    case 'G': {
      const double inner = double(d.gdn_num_heads) * d.gdn_head_dim;
      gemm(w, t, h, 4 * inner + 2 * d.gdn_num_heads, b);  // q, k, v, z, beta, alpha
      w.other_flops += 2 * t * 3 * inner * d.conv_kernel;
      w.other_flops += 6 * t * d.gdn_num_heads * double(d.gdn_head_dim) * d.gdn_head_dim;
      w.other_flops += 5 * t * inner;
      w.activation_bytes += t * (2 * 3 * inner + 4 * inner) * b;
      gemm(w, t, inner, h, b);
      break;
    }
    case '-':
      gemm(w, t, h, 2.0 * d.ffn_hidden, b);  // gate and up (SwiGLU)
      w.other_flops += 3 * t * d.ffn_hidden;
      gemm(w, t, d.ffn_hidden, h, b);
      break;
    default:
      throw ScheduleError(ErrorCode::BadConfig,
                          "no cost model for layer symbol '" + std::string(1, symbol) + "'");
  }
  return w;
}

SlotWork moe_preprocess_work(const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  w.other_flops += 4 * t * h;  // pre-MLP RMSNorm
  w.activation_bytes += 2 * t * h * b;
  fixed_gemm(w, t, h, d.num_experts, b);
  w.other_flops += 3 * t * d.num_experts;  // softmax + top-k
  if (d.shared_expert_ffn > 0) {
    gemm(w, t, h, 2.0 * d.shared_expert_ffn, b);
    w.other_flops += 3 * t * d.shared_expert_ffn;
    gemm(w, t, d.shared_expert_ffn, h, b);
  }
  return w;
}

SlotWork expert_work(const ModelDims& d, double copies, int local_experts) {
  const double b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  // Every local expert's weights are read once however many token copies it gets.
  w.weight_gemm_flops = 6 * copies * h * d.moe_ffn_hidden;
  w.weight_bytes = local_experts * expert_params_per_expert(d) * b;
  w.other_flops = 3 * copies * d.moe_ffn_hidden;
  w.activation_bytes = copies * (2 * h + 3.0 * d.moe_ffn_hidden) * b;
  return w;
}

SlotWork mtp_pre_work(const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  w.other_flops += 2 * 4 * t * h;  // enorm, hnorm
  w.weight_bytes += t * h * b;      // embedding rows
  w.activation_bytes += 2 * t * h * b;
  gemm(w, t, 2 * h, h, b);          // eh_proj
  return w;
}

SlotWork mtp_post_work(const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  w.other_flops = 4 * t * h;
  w.weight_bytes = h * b;
  w.activation_bytes = 2 * t * h * b;
  return w;
}

SlotWork embedding_work(const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w;
  w.weight_bytes = t * h * b;  // the gathered rows
  w.activation_bytes = t * h * b;
  return w;
}

SlotWork output_work(const ModelDims& d) {
  const double t = d.tokens(), b = d.bytes_per_element, h = d.hidden;
  SlotWork w = mtp_post_work(d);  // final norm
  fixed_gemm(w, t, h, d.vocab, b);
  w.other_flops += 5 * t * d.vocab;
  w.activation_bytes += t * d.vocab * 4.0;  // fp32 logits for the loss
  return w;
}

SlotWork slot_work(const LayerShape& shape, Slot slot, const ModelDims& d, int ep, int ep_rank,
                   double routing_skew) {
  SlotWork w;
  if (!shape.has_slot(slot)) return w;
  switch (slot) {
    case Slot::PreDispatch:
      if (shape.mtp) w += mtp_pre_work(d);
      for (char c : shape.pre) w += symbol_work(c, d);
      if (shape.moe()) w += moe_preprocess_work(d);
      break;
    case Slot::Mlp:
      if (shape.terminal == '-') w += symbol_work('-', d);
      if (shape.moe()) w += expert_work(d, routed_copies(d, ep, ep_rank, routing_skew), d.num_experts / ep);
      break;
    case Slot::MtpPost: w += mtp_post_work(d); break;
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

double routed_payload_bytes(const ModelDims& d) {
  return d.tokens() * d.top_k * double(d.hidden) * d.bytes_per_element;
}

double routed_copies(const ModelDims& d, int ep, int ep_rank, double routing_skew) {
  return ep * d.tokens() * d.top_k *
         cached_shares(ep, routing_skew)[static_cast<std::size_t>(ep_rank)];
}

double a2a_bytes(const ModelDims& d, int ep, double routing_skew, Slot slot, Phase phase, int from,
                 int to) {
  const auto& shares = cached_shares(ep, routing_skew);
  const bool toward_experts = (slot == Slot::Dispatch) == (phase == Phase::Forward);
  const int owner_share_index = toward_experts ? to : from;
  return routed_payload_bytes(d) * shares[static_cast<std::size_t>(owner_share_index)];
}

double pipe_bytes(const ModelDims& d) {
  return d.tokens() * double(d.hidden) * d.bytes_per_element;
}

double non_expert_params(char symbol, const ModelDims& d) {
  const double h = d.hidden;
  switch (symbol) {
    case '*':
    case 'W': {
      const double q = double(d.num_heads) * d.head_dim, kv = double(d.num_kv_heads) * d.head_dim;
      return h * (q + 2 * kv) + q * h + h;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      const double q = double(d.num_heads) * d.head_dim;
      return h * d.q_lora_rank + double(d.q_lora_rank) * q + h * d.kv_lora_rank +
             double(d.kv_lora_rank) * 2 * q + q * h + 2 * h + d.q_lora_rank + d.kv_lora_rank;
    }
    case 'M': {
      const double inner = double(d.mamba_num_heads) * d.mamba_head_dim;
      const double bc = 2.0 * d.mamba_groups * d.mamba_state;
      return h * (2 * inner + bc + d.mamba_num_heads) + (inner + bc) * d.conv_kernel +
             3.0 * d.mamba_num_heads + inner + inner * h + h;
    }
    case 'G': {
      const double inner = double(d.gdn_num_heads) * d.gdn_head_dim;
      return h * (4 * inner + 2 * d.gdn_num_heads) + 3 * inner * d.conv_kernel +
             2.0 * d.gdn_num_heads + inner + inner * h + h;
    }
    case '-': return 3 * h * d.ffn_hidden + h;
    case 'E': return h + h * d.num_experts + 3 * h * d.shared_expert_ffn;
    default:
      throw ScheduleError(ErrorCode::BadConfig,
                          "no parameter count for layer symbol '" + std::string(1, symbol) + "'");
  }
}

double expert_params_per_expert(const ModelDims& d) {
  return 3.0 * d.hidden * d.moe_ffn_hidden;
}
double embedding_params(const ModelDims& d) { return double(d.vocab) * d.hidden; }
double output_params(const ModelDims& d) { return double(d.vocab) * d.hidden + d.hidden; }
double mtp_extra_params(const ModelDims& d) { return 2.0 * d.hidden * d.hidden + 3.0 * d.hidden; }

}  // namespace ht::schedule
