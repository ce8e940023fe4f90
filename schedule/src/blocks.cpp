// Blocks of a compute slot (see blocks.hpp). Collective sizes follow megatron-parallel.md 2.2
// (TP/SP), 3.2-3.4 (CP); widths are elements per gathered token.
#include "blocks.hpp"

#include <algorithm>

namespace ht::schedule::detail {
namespace {

bool attention_like(char c) { return c == '*' || c == 'W' || c == '+' || c == 'D' || c == 'C' || c == 'H'; }
bool mla_like(char c) { return c == '+' || c == 'D' || c == 'C' || c == 'H'; }

Block layer_block(char c, const ModelDims& d, const Shard& sh) {
  Block b;
  b.symbol = c;
  b.work = symbol_work(c, d, sh);
  b.tp_split = true;
  b.gather_width = d.hidden;
  b.scatter_width = d.hidden;
  const double n = shard_tokens(d, sh);
  if (mla_like(c)) {
    // Down-projections run on the owned tokens; the low-rank activations and the RoPE key are
    // what gets gathered for the TP-split up-projections.
    b.gather_width = double(d.q_lora_rank) + d.kv_lora_rank + d.mla_rope_head_dim;
  }
  if (attention_like(c) && sh.cp > 1) {
    const double heads = mla_like(c) ? d.num_heads / double(sh.tp)
                                     : (d.num_kv_heads >= sh.tp ? d.num_kv_heads / double(sh.tp) : 1.0);
    const double k_width = mla_like(c) ? double(d.mla_qk_dim()) + d.mla_rope_head_dim : d.head_dim;
    const double v_width = mla_like(c) ? d.mla_v_dim() : d.head_dim;
    b.ring_elements = n * heads * (k_width + v_width);
  }
  if (c == 'M' && sh.cp > 1) {
    const double inner = double(d.mamba_num_heads) * d.mamba_head_dim / sh.tp;
    const double groups = double(d.mamba_groups) / sh.tp;
    const double replicate = groups < sh.cp ? sh.cp / groups : 1.0;  // B/C states for each CP rank
    const double bc = 2.0 * replicate * groups * d.mamba_state;
    // Forward: z, x, B, C, dt into head parallelism, y back (section 3.3).
    b.cp_a2a_elements = n * (2 * inner + bc + d.mamba_num_heads / double(sh.tp) + inner);
  }
  if (c == 'G' && sh.cp > 1) {
    const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim() / sh.tp;
    const double v = double(d.gdn_num_heads) * d.gdn_head_dim / sh.tp;
    b.cp_a2a_elements = n * (2 * qk + 2 * v + 2.0 * d.gdn_num_heads / sh.tp + v);  // in_proj out, then y
  }
  return b;
}

}  // namespace

std::vector<Block> slot_blocks(const LayerShape& shape, Slot slot, const ModelDims& d, int ep, int ep_rank,
                               const MoeRoute& route, const Shard& sh) {
  std::vector<Block> out;
  if (!shape.has_slot(slot)) return out;
  switch (slot) {
    case Slot::PreDispatch:
      if (shape.mtp) {
        Block m;
        m.symbol = 'm';
        m.work = mtp_pre_work(d, sh);
        m.tp_split = true;  // eh_proj is column-parallel from 2h, then gathered back (section 2.2)
        m.gather_width = 3.0 * d.hidden;
        m.scatter_width = d.hidden;  // the embedding's reduce-scatter
        out.push_back(std::move(m));
      }
      for (char c : shape.pre) out.push_back(layer_block(c, d, sh));
      if (shape.moe()) {
        Block r;
        r.symbol = 'r';
        r.work = moe_router_work(d, sh, route);
        out.push_back(std::move(r));
        if (d.shared_expert_ffn > 0) {
          Block s;
          s.symbol = 's';
          s.work = shared_expert_work(d, sh);
          s.tp_split = true;
          s.gather_width = d.hidden;
          s.scatter_width = d.hidden;
          out.push_back(std::move(s));
        }
      }
      break;
    case Slot::Mlp:
      if (shape.terminal == '-') out.push_back(layer_block('-', d, sh));
      if (shape.moe()) {
        Block x;
        x.symbol = 'x';
        x.work = expert_work(d, routed_copies(d, ep, ep_rank, route, sh), d.num_experts / ep, sh, route);
        out.push_back(std::move(x));
      }
      break;
    case Slot::MtpPost: {
      Block n;
      n.symbol = 'n';
      n.work = mtp_post_work(d, sh);
      out.push_back(std::move(n));
      break;
    }
    default: break;
  }
  return out;
}

Block recompute_block(const Block& b, RecomputeModule module, const ModelDims& d, const Shard& sh) {
  Block r;
  r.symbol = b.symbol;
  const auto keep = [&](auto pred) {
    for (const Kernel& k : b.work.kernels)
      if (pred(k)) {
        r.work.kernels.push_back(k);
        (k.kind == KernelKind::Gemm || k.kind == KernelKind::GroupedGemm ? r.work.weight_gemm_flops
                                                                         : r.work.other_flops) += k.flops;
        r.work.activation_bytes += k.bytes;
      }
  };
  switch (module) {
    case kRecomputeCoreAttn:
      if (b.symbol == '*' || b.symbol == 'W') keep([](const Kernel& k) { return k.kind == KernelKind::Attention; });
      break;
    case kRecomputeLayernorm:
      if (b.symbol == 'r' || mla_like(b.symbol)) {
        const double t = owned_tokens(d, sh);
        r.work.other_flops = 4 * t * d.hidden;
        r.work.activation_bytes = 2 * t * d.hidden * d.bytes_per_element;
        r.work.kernels.push_back({KernelKind::Elementwise, false, 0, 0, 0, 1, r.work.other_flops, r.work.activation_bytes});
      }
      break;
    case kRecomputeMoeAct:
      if (b.symbol == 'x') keep([](const Kernel& k) { return k.kind == KernelKind::Elementwise; });
      break;
    case kRecomputeMlaUpProj:
      if (mla_like(b.symbol)) {
        // The up-projections are the GEMMs on the gathered tokens with the low-rank inputs.
        const double rank_q = d.q_lora_rank, rank_kv = d.kv_lora_rank;
        keep([&](const Kernel& k) { return k.kind == KernelKind::Gemm && (k.k == rank_q || k.k == rank_kv); });
        r.tp_split = true;
        r.gather_width = rank_q + rank_kv;  // the column-parallel inputs are gathered again
      }
      break;
    case kRecomputeMlp:
      if (b.symbol == '-') r = b;
      break;
    case kRecomputeSharedExperts:
      if (b.symbol == 's') r = b;
      break;
    case kRecomputeMoe: break;  // the whole MoE layer: the plan builder replays its slots
  }
  r.ring_elements = 0;
  r.cp_a2a_elements = 0;
  if (!r.tp_split) r.gather_width = r.scatter_width = 0;
  if (module == kRecomputeMlaUpProj) r.scatter_width = 0;
  return r;
}

}  // namespace ht::schedule::detail
