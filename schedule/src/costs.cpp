// Closed-form costs of plan nodes (conventions in costs.hpp). Every helper adds its flops and
// bytes to a SlotWork and the kernel that does them to its kernel list, so the node totals and
// the kernel model cannot drift apart.
#include "ht/schedule/costs.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
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

// A token permutation (gather or scatter of `rows` rows of `width` elements): memory bound,
// indexed (physics.md 1.6: permute kernels reach 30-50 % of HBM).
void permute(SlotWork& w, double read_rows, double write_rows, double width, double bytes) {
  const double traffic = (read_rows + write_rows) * width * bytes;
  w.activation_bytes += traffic;
  w.kernels.push_back({KernelKind::Permute, false, 0, 0, 0, 1, 0, traffic});
}

// A physical layer's own norm and residual (pre-norm residual block, on the T owned tokens under
// sequence parallelism): RMSNorm reads and writes T x h; the residual add (Megatron's
// bias-dropout-add) reads the block's output and the residual and writes their sum.
void norm_and_residual(SlotWork& w, const ModelDims& d, const Shard& sh) {
  const double t = double(d.tokens()) / (double(sh.cp) * sh.tp), h = d.hidden, b = d.bytes_per_element;
  w.other_flops += 4 * t * h + t * h;
  w.activation_bytes += 5 * t * h * b;
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, 4 * t * h, 2 * t * h * b});
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, t * h, 3 * t * h * b});
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
  if (symbol == '*' || symbol == 'W' || symbol == '+' || symbol == 'D' || symbol == 'C' || symbol == 'H' ||
      symbol == 'M' || symbol == 'G' || symbol == '-')
    norm_and_residual(w, d, sh);
  switch (symbol) {
    case '*':
    case 'W': {
      const double heads = d.num_heads / tp, kv_heads = kv_heads_per_rank(d, sh.tp);
      const double q = heads * d.head_dim, kv = kv_heads * d.head_dim;
      gemm(w, t, h, q * (1 + d.attn_output_gate) + 2 * kv, b);  // q (and its gate), k, v
      if (d.qk_norm) elementwise(w, 4 * t * (q + kv), 2 * t * (q + kv) * b);
      // Rotary embedding of q and k (the rotated share of each head), read and written once.
      if (d.rotary_percent > 0) {
        const double rotated = (q + kv) * d.rotary_percent / 100.0;
        elementwise(w, 3 * t * rotated, 2 * t * rotated * b);
      }
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
      const double qk = d.mla_qk_dim() + d.mla_rope_head_dim, v = d.mla_v_dim();
      gemm(w, owned, h, d.q_lora_rank, b);
      gemm(w, t, d.q_lora_rank, heads * qk, b);
      gemm(w, owned, h, double(d.kv_lora_rank) + d.mla_rope_head_dim, b);
      gemm(w, t, d.kv_lora_rank, heads * (double(d.mla_qk_dim()) + v), b);
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
      {  // the chunked delta rule: one chain per sequence and value head of the rank
        const double flops = 6 * t * heads * double(d.gdn_qk_head_dim()) * d.gdn_head_dim;
        const double sequence = double(d.seq_len) / sh.cp, chains = d.micro_batch * heads;
        w.other_flops += flops;
        w.kernels.push_back({KernelKind::DeltaRule, false, sequence, chains, 0, 1, flops,
                             t * (2 * qk + 2 * v + 2 * heads) * b});
      }
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

SlotWork moe_router_work(const ModelDims& d, const Shard& sh, const MoeRoute& route) {
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
  // The MoE layer's residual add (the combined output plus the layer input).
  elementwise(w, t * h, 3 * t * h * b);
  // The all-to-all dispatcher permutes the T tokens into T top_k rows by expert before sending
  // (megatron-parallel.md 9.1); DeepEP and HybridEP gather inside their dispatch kernel, and the
  // all-gather dispatcher sends the tokens as they are.
  if (route.dispatcher == Dispatcher::AllToAll) permute(w, t * d.top_k, t * d.top_k, d.moe_width(), b);
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

SlotWork moe_preprocess_work(const ModelDims& d, const Shard& sh, const MoeRoute& route) {
  SlotWork w = moe_router_work(d, sh, route);
  w += shared_expert_work(d, sh);
  return w;
}

SlotWork expert_work(const ModelDims& d, double copies, int local_experts, const Shard& sh, const MoeRoute& route) {
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
  // Received rows into expert order before the experts, and back after them (megatron-parallel.md
  // 9.1): the all-to-all dispatcher sorts its chunks by local expert when a rank holds several;
  // DeepEP and HybridEP deliver tokens and permute them here; the all-gather dispatcher picks its
  // experts' rows from every token of the group and scatters the results back. The all-to-all
  // dispatcher's unpermute after the combine (T top_k rows into T tokens, weighted) is counted here
  // too (it runs after the combine, on the same stream).
  const double tokens = owned_tokens(d, sh);
  switch (route.dispatcher) {
    case Dispatcher::AllToAll:
      if (local_experts > 1) permute(w, copies, copies, h, b);
      break;
    case Dispatcher::DeepEP:
    case Dispatcher::HybridEP:
    case Dispatcher::AllGather: permute(w, copies, copies, h, b); break;
  }
  grouped(h, (x - 1) * f);
  w.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, w.other_flops, 3 * copies * f * b});
  grouped(f, h);
  switch (route.dispatcher) {
    case Dispatcher::AllToAll:
      if (local_experts > 1) permute(w, copies, copies, h, b);
      permute(w, tokens * d.top_k, tokens, h, b);
      break;
    case Dispatcher::DeepEP:
    case Dispatcher::HybridEP: permute(w, copies, copies, h, b); break;
    case Dispatcher::AllGather: permute(w, copies, copies, h, b); break;
  }
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

SlotWork output_work(const ModelDims& d, const Shard& sh, bool fused_loss) {
  const double t = shard_tokens(d, sh), b = d.bytes_per_element, h = d.hidden;
  const double vocab = double(d.vocab) / sh.tp;
  SlotWork w = mtp_post_work(d, sh);  // final norm
  fixed_gemm(w, t, h, vocab, b);
  elementwise(w, 5 * t * vocab, t * vocab * (fused_loss ? kFusedLossBytesPerLogit : kUnfusedLossBytesPerLogit / 3));
  w.activation_bytes += t * vocab * 4.0;  // fp32 logits for the loss
  return w;
}

SlotWork slot_work(const LayerShape& shape, Slot slot, const ModelDims& d, int ep, int ep_rank,
                   const MoeRoute& route, const Shard& sh) {
  SlotWork w;
  if (!shape.has_slot(slot)) return w;
  switch (slot) {
    case Slot::PreDispatch:
      if (shape.mtp) w += mtp_pre_work(d, sh);
      for (char c : shape.pre) w += symbol_work(c, d, sh);
      if (shape.moe()) w += moe_preprocess_work(d, sh, route);
      break;
    case Slot::Mlp:
      if (shape.terminal == '-') w += symbol_work('-', d, sh);
      if (shape.moe())
        w += expert_work(d, routed_copies(d, ep, ep_rank, route, sh), d.num_experts / ep, sh, route);
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

double routed_copies(const ModelDims& d, int ep, int ep_rank, const MoeRoute& route, const Shard& sh) {
  return ep * owned_tokens(d, sh) * d.top_k *
         cached_shares(ep, route.skew)[static_cast<std::size_t>(ep_rank)] * sh.etp * route.load_factor;
}

double a2a_bytes(const ModelDims& d, int ep, const MoeRoute& route, Slot slot, Phase phase, int from,
                 int to, const Shard& sh) {
  const auto& shares = cached_shares(ep, route.skew);
  const bool toward_experts = (slot == Slot::Dispatch) == (phase != Phase::Backward);
  const int owner_share_index = toward_experts ? to : from;
  return routed_payload_bytes(d, sh) * shares[static_cast<std::size_t>(owner_share_index)] * route.load_factor;
}

std::vector<Kernel> with_precision(std::vector<Kernel> kernels, Precision precision) {
  if (precision == Precision::Bf16) return kernels;
  std::vector<Kernel> out;
  out.reserve(kernels.size() * 2);
  for (Kernel k : kernels) {
    const bool linear = (k.kind == KernelKind::Gemm || k.kind == KernelKind::GroupedGemm) && k.delayable;
    if (linear) {
      const double elements = k.m * k.groups * k.k;
      out.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, elements, 4 * elements});
      k.fp8 = true;
    }
    out.push_back(k);
  }
  return out;
}

std::vector<Transfer> a2a_sends(const ModelDims& d, const std::vector<int>& group, int me, const MoeRoute& route,
                                Slot slot, Phase phase, const Shard& sh) {
  const int ep = static_cast<int>(group.size());
  std::vector<Transfer> out;
  const auto peer_bytes = [&](auto bytes_to) {
    for (int i = 0; i < ep; ++i)
      if (i != me) out.push_back({group[static_cast<std::size_t>(i)], bytes_to(i)});
  };
  const double b = d.bytes_per_element, width = d.moe_width(), tokens = owned_tokens(d, sh);
  switch (route.skew != 0 ? Dispatcher::AllToAll : route.dispatcher) {
    case Dispatcher::AllToAll:
      peer_bytes([&](int i) { return a2a_bytes(d, ep, route, slot, phase, me, i, sh); });
      return out;
    case Dispatcher::AllGather: {
      // The forward combine reduce-scatters in the router's fp32 (megatron-parallel.md 9.1).
      const double element = slot == Slot::Combine && phase != Phase::Backward ? 4.0 : b;
      peer_bytes([&](int) { return tokens * width * element; });
      return out;
    }
    case Dispatcher::DeepEP:
    case Dispatcher::HybridEP: break;
  }
  const int gpn = std::max(1, route.gpus_per_node);
  const double local_experts = double(d.num_experts) / ep;
  const bool fp8 = route.dispatch_fp8 && slot == Slot::Dispatch && phase == Phase::Forward;
  const double token_copy = tokens * width * (fp8 ? 1 + 4.0 / 128 : b);  // every token, once
  const double copy = token_copy * route.load_factor, rdma_copy = token_copy * route.node_load_factor;
  const double p_rank = hit_probability(d, local_experts);
  std::map<int, std::vector<int>> by_node;  // cluster node -> indices in the group
  for (int i = 0; i < ep; ++i) by_node[group[static_cast<std::size_t>(i)] / gpn].push_back(i);
  const int my_node = group[static_cast<std::size_t>(me)] / gpn;
  const auto& local = by_node[my_node];
  const auto pos = static_cast<std::size_t>(std::find(local.begin(), local.end(), me) - local.begin());
  double forwarded = 0;  // NVLink copies the receiving nodes make of this rank's tokens
  std::map<int, double> bytes;  // group index -> bytes
  for (const auto& [node, members] : by_node) {
    if (node == my_node) {
      for (int i : members)
        if (i != me) bytes[i] += copy * p_rank;
      continue;
    }
    const double m = static_cast<double>(members.size());
    bytes[members[pos % members.size()]] += rdma_copy * hit_probability(d, m * local_experts);
    forwarded += copy * (m - 1) * p_rank;
  }
  if (local.size() > 1)
    for (int i : local)
      if (i != me) bytes[i] += forwarded / static_cast<double>(local.size() - 1);
  peer_bytes([&](int i) { return bytes.count(i) ? bytes[i] : 0.0; });
  return out;
}

double hit_probability(int num_experts, int top_k, double experts) {
  // 1 - prod_{i<k} (E - experts - i) / (E - i): none of the k distinct experts is among them.
  double miss = 1;
  for (int i = 0; i < top_k; ++i) {
    const double left = double(num_experts) - experts - i;
    miss *= left <= 0 ? 0.0 : left / (double(num_experts) - i);
  }
  return 1 - miss;
}

double hit_probability(const ModelDims& d, double experts) {
  const int groups = d.router_groups, chosen = d.router_group_topk;
  if (groups <= 0 || chosen <= 0 || groups == chosen) return hit_probability(d.num_experts, d.top_k, experts);
  const double size = double(d.num_experts) / groups;
  const int candidates = static_cast<int>(chosen * size);
  if (experts <= size) return double(chosen) / groups * hit_probability(candidates, d.top_k, experts);
  const double q = experts / size;
  if (q != std::floor(q) || q > groups) return hit_probability(d.num_experts, d.top_k, experts);
  // P(j of the q groups among the chosen) = C(q, j) C(G - q, chosen - j) / C(G, chosen).
  const auto choose = [](double n, double k) {
    if (k < 0 || k > n) return 0.0;
    return std::exp(std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1));
  };
  double miss = 0;
  for (int j = 0; j <= std::min<int>(static_cast<int>(q), chosen); ++j) {
    const double pj = choose(q, j) * choose(groups - q, chosen - j) / choose(groups, chosen);
    miss += pj * (1 - hit_probability(candidates, d.top_k, j * size));
  }
  return 1 - miss;
}

double expected_max_normal(int n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule on [-9, 9].
  constexpr int kSteps = 4000;
  constexpr double kLo = -9, kHi = 9, kDx = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double x = kLo + (i + 0.5) * kDx;
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * phi * std::pow(cdf, n - 1) * kDx;
  }
  return sum;
}

double expert_load_factor(const ModelDims& d, int ep, const Shard& sh, Routing routing, int ranks_pooled) {
  const int units = ep / std::max(1, ranks_pooled);
  if (routing == Routing::Mean || units <= 1 || d.num_experts <= 0 || d.top_k <= 0) return 1;
  const double e = d.num_experts, k = d.top_k, local = e / units;
  const double tokens = ep * owned_tokens(d, sh);  // routed by the EP group in one dispatch
  const double mean = tokens * k / units;
  // One token's copies on a given rank: hypergeometric (k draws of e, `local` of them marked).
  const double p = local / e;
  const double per_token_var = e > 1 ? k * p * (1 - p) * (e - k) / (e - 1) : 0;
  double var = tokens * per_token_var;
  if (routing == Routing::AuxLoss) {
    const double cv_rank = kRouterPopularityCv / std::sqrt(local);  // mean of `local` experts
    var += mean * mean * cv_rank * cv_rank;
  }
  return 1 + expected_max_normal(units) * std::sqrt(var) / mean;
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
      const double a = d.num_heads, qk = double(d.mla_qk_dim()) + d.mla_rope_head_dim, v = d.mla_v_dim();
      return h * d.q_lora_rank + d.q_lora_rank * a * qk + h * (double(d.kv_lora_rank) + d.mla_rope_head_dim) +
             d.kv_lora_rank * a * (double(d.mla_qk_dim()) + v) + a * v * h + h + d.q_lora_rank + d.kv_lora_rank;
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
