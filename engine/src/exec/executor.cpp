// The executor (see executor.hpp): per-rank models built from the same seed as HybridModel,
// per-(layer, microbatch) slot state, and the node actions of the plan on CpuWorld streams.
// Slot contents follow reference section 3.3: pre_dispatch runs the group's pre-layers and, for
// an 'E' terminal, the pre-MLP norm, router, permutation and shared expert; dispatch and combine
// are the all-to-alls (combine also unpermutes, adds the shared output and the residual); mlp
// runs the local experts or the dense '-' block. An MTP depth (section 3.4) is one more layer
// plan: its pre_dispatch adds the embedding, enorm/hnorm and eh_proj in front of its inner
// layer's, and mtp_post applies its final norm; post_process runs every head.
//
// Pipeline stages: each rank builds only the layers its stage holds (read from the plan), the
// embedding on stage 0 and the final norm and output layer on the last stage; PipeSend/PipeRecv
// nodes move the hidden state forward and its gradient backward between model chunks. A layer's
// gradients are accumulated over the same microbatches in the same order as on one stage (both
// 1F1B orders walk each chunk's backward microbatches in ascending order), so PP = k gives the
// single-stage bits.
#include "ht/engine/exec/executor.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <tuple>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/engine/exec/weight_steps.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/layers/table.hpp"
#include "ht/engine/safetensors.hpp"
#include <cmath>
#include "ht/engine/runtime/communicator.hpp"
#include "ht/engine/runtime/cpu_world.hpp"
#include "ht/engine/runtime/event_chain.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/node_args.hpp"
#include "members.hpp"

namespace ht::engine::exec {
namespace impl {

using detail::Member;
using detail::MemberState;
using detail::MoeLayer;
using Tf = Tensor<float>;
using schedule::Phase;
using schedule::Slot;

constexpr const char* kWho = "executor";
[[noreturn]] void fail(const std::string& message) { walk_fail(kWho, message); }

// FLOPs as an integer (span arguments are text).
std::string flops_text(double flops) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", flops);
  return text;
}

Tf ones(int n) {
  Tf t({n});
  std::fill(t.data.begin(), t.data.end(), 1.0f);
  return t;
}

// Spans over whole vectors, for the sized all_to_all_v.
template <class T, class V>
std::vector<std::span<T>> spans_of(V& vectors) {
  std::vector<std::span<T>> out;
  for (auto& v : vectors) out.emplace_back(v.data(), v.size());
  return out;
}

// Records on the running node's span what the plan cannot know: the bytes this member actually
// sends to each other member (global rank:bytes;...), which follow the routing. The twin reads
// them back as the node's transfers (sim/calibrate.hpp).
template <class V>
void annotate_sent(const runtime::Communicator& comm, const std::vector<V>& send) {
  std::string text;
  for (int p = 0; p < comm.size(); ++p) {
    if (p == comm.rank()) continue;
    if (!text.empty()) text += ';';
    text += std::to_string(comm.global_rank(p)) + ':' +
            std::to_string(send[static_cast<std::size_t>(p)].size() * sizeof(float));
  }
  runtime::annotate_span("sent_bytes", text);
}

// One physical layer: h_out = h + branch(rmsnorm(h)).
struct Block {
  char symbol = 0;
  int physical = 0;
  std::string key_prefix, canonical_prefix;
  Tf norm_w, norm_g;
  std::unique_ptr<Member> member;  // null for 'E'
  std::unique_ptr<MoeLayer> moe;   // 'E' only
};

// Per-microbatch state of one Block.
struct BlockState {
  Tf h_in, normed, out, norm_g_staged;
  RMSNormCache<float> nc;
  std::unique_ptr<MemberState> ms;
};

struct LogicalLayer {
  bool held = false;          // this rank's pipeline stage holds the layer (else blocks is empty)
  std::vector<Block> blocks;  // members in order
  int terminal = -1;          // index of the '-' / 'E' terminal, -1 when none
  float loss_scale = 1.0f;    // router losses: 1 in the trunk, 1 / depths inside MTP (reference 5.1)
  bool moe() const { return terminal >= 0 && blocks[static_cast<std::size_t>(terminal)].symbol == 'E'; }
  int pre_count() const { return terminal >= 0 ? terminal : static_cast<int>(blocks.size()); }
};

// Where the rows of (source rank, local expert) sit in the expert-major buffer.
struct EpLayout {
  std::vector<std::vector<std::uint64_t>> counts;  // [source][local expert]
  std::vector<std::vector<std::size_t>> offset;    // [source][local expert] row in expert-major
  std::vector<std::size_t> expert_start;           // [local expert] first row; back() = rows
};

struct MoeState {
  MoeRouting<float> routing;
  std::vector<float> permuted_in, permuted_out;  // my tokens, global expert-major order
  std::vector<float> expert_in, expert_out;      // rows my experts process, expert-major
  std::vector<SwiGLUCache<float>> expert_caches;
  std::vector<float> shared_out;
  SwiGLUCache<float> shared_cache;
  EpLayout layout;
  MoeParams<float> staged;
  // backward
  Tf d_residual;  // parked: gradient the combine node sends to the residual
  Tf d_shared;    // parked: gradient of the shared-expert output
  std::vector<float> dperm_out, dw, dexpert_out, dexpert_in, dperm_in;
};

struct LayerState {
  std::vector<BlockState> blocks;
  std::unique_ptr<MoeState> moe;
};

// One MTP depth (reference sections 3.4, 5.1): eh_proj(cat(enorm(embedding of the tokens rolled
// depth + 1 left), hnorm(previous hidden state))), the MTP pattern as one logical layer (the plan
// runs a depth as one layer plan), then its final norm; the embedding and the output layer are
// the main model's.
struct MtpDepth {
  std::string prefix;  // "mtp.layers.<depth>."
  Tf enorm, enorm_g, hnorm, hnorm_g, eh_proj, eh_proj_g, final_norm, final_norm_g;
  LogicalLayer layer;
};

// Per-microbatch state of one MTP depth. `hout` is parked by mtp_post for two consumers (its
// head in post_process and the next depth's hnorm); `d_hout` collects both their gradients
// before mtp_post's backward runs once (reference 3.4, "Gradient merge").
struct MtpState {
  LayerState inner;
  Tensor<int> ids, targets;
  Tf weights, emb, en, hin, hn, cat, pre, hout, logits;
  RMSNormCache<float> enc, hnc, fnc;
  CrossEntropyCache<float> ce;
  double loss = 0;
  Tf d_hout;
  Tf enorm_staged, hnorm_staged, eh_proj_staged;  // pre_dispatch weight gradients (its W node)
};

// One model chunk (microbatch, vp_stage) of one rank: the chunks of one microbatch on a rank
// (virtual pipeline stages) each carry their own hidden state, as Megatron's chunk plans do.
struct ChunkState {
  const Batch* batch = nullptr;
  float weight = 0;  // CE weight per token
  Tf h, dh;          // the hidden state flowing forward / its gradient flowing backward
  Tf h_final, logits, lm_weights;
  RMSNormCache<float> fnc;
  CrossEntropyCache<float> ce;
  double loss = 0;
  std::vector<LayerState> layers;  // by global logical layer; states only for the chunk's layers
  // MTP (last chunk of the last stage only): the first depth's pre_dispatch applies the final
  // norm and parks h_final for the main head and its own hnorm; d_h_final merges both gradients.
  std::vector<MtpState> mtp;
  std::vector<float> mtp_weight;  // CE weight per valid token, per depth
  Tf h_pre_final, d_h_final;
};

// What one rank holds: its pipeline stage's layers, the embedding on the first stage, the final
// norm and output layer on the last.
struct RankModel {
  bool first = false, last = false;
  Tf wte, wte_g, final_norm, final_norm_g, out_w, out_w_g;
  std::string final_norm_key;
  std::vector<LogicalLayer> layers;  // by global logical layer; only held ones are built
  std::vector<MtpDepth> mtp;         // the last stage's MTP depths
};

// Where a rank sits, read from the plan (RankPlan and the ranks its nodes run on).
struct RankLayout {
  int pp_rank = 0, dp_rank = 0, ep_rank = 0;
  bool first = false, last = false;  // runs pre_process / post_process
  std::vector<char> holds;           // per global logical layer
};

// The stage layout of a plan: every logical layer runs on one pipeline stage (on all its DP
// ranks) in one model chunk; pre_process runs on stage 0, post_process on the last stage.
struct StageLayout {
  std::vector<RankLayout> ranks;
  std::vector<int> layer_stage, layer_vp;  // per global logical layer
};

StageLayout read_layout(const schedule::Plan& plan, int layers, int mtp_depths) {
  StageLayout out;
  const int n = plan.global_ranks();
  out.ranks.resize(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto& rp = plan.ranks[static_cast<std::size_t>(r)];
    if (rp.rank != r || rp.pp_rank != r / plan.dp || rp.dp_rank != r % plan.dp)
      fail("plan rank " + std::to_string(r) + " is not pp rank " + std::to_string(r / plan.dp) + ", dp rank " +
           std::to_string(r % plan.dp));
    auto& lo = out.ranks[static_cast<std::size_t>(r)];
    lo.pp_rank = rp.pp_rank;
    lo.dp_rank = rp.dp_rank;
    lo.ep_rank = rp.ep_rank;
    lo.holds.assign(static_cast<std::size_t>(layers), 0);
  }
  out.layer_stage.assign(static_cast<std::size_t>(layers), -1);
  out.layer_vp.assign(static_cast<std::size_t>(layers), -1);
  for (const auto& node : plan.nodes) {
    if (node.rank < 0 || node.rank >= n) fail("node " + node.label() + " runs on rank " + std::to_string(node.rank));
    if (node.vp_stage < 0 || node.vp_stage >= plan.vpp)
      fail("node " + node.label() + " names model chunk " + std::to_string(node.vp_stage) + " of " + std::to_string(plan.vpp));
    auto& lo = out.ranks[static_cast<std::size_t>(node.rank)];
    if (node.slot == Slot::PreProcess) lo.first = true;
    if (node.slot == Slot::PostProcess) lo.last = true;
    if (node.layer < 0) continue;
    if (node.mtp) {
      // MTP depths follow the decoder in the model's last chunk (reference section 3.2).
      if (node.layer >= mtp_depths)
        fail("node " + node.label() + " names MTP depth " + std::to_string(node.layer) + " of " + std::to_string(mtp_depths));
      if (lo.pp_rank != plan.pp - 1 || node.vp_stage != plan.vpp - 1)
        fail("MTP node " + node.label() + " does not run in the model's last chunk");
      continue;
    }
    if (node.layer >= layers)
      fail("node " + node.label() + " names logical layer " + std::to_string(node.layer) + " of " + std::to_string(layers));
    const auto l = static_cast<std::size_t>(node.layer);
    lo.holds[l] = 1;
    if (out.layer_stage[l] < 0) {
      out.layer_stage[l] = lo.pp_rank;
      out.layer_vp[l] = node.vp_stage;
    } else if (out.layer_stage[l] != lo.pp_rank || out.layer_vp[l] != node.vp_stage) {
      fail("logical layer " + std::to_string(l) + " runs in two pipeline stages or model chunks");
    }
  }
  for (std::size_t l = 0; l < out.layer_stage.size(); ++l)
    if (out.layer_stage[l] < 0) fail("logical layer " + std::to_string(l) + " has no node in the plan");
  for (int r = 0; r < n; ++r) {
    const auto& lo = out.ranks[static_cast<std::size_t>(r)];
    for (std::size_t l = 0; l < lo.holds.size(); ++l)
      if ((lo.holds[l] != 0) != (out.layer_stage[l] == lo.pp_rank))
        fail("rank " + std::to_string(r) + " does not run the same layers as the other DP ranks of its stage");
    if (lo.first != (lo.pp_rank == 0) || lo.last != (lo.pp_rank == plan.pp - 1))
      fail("rank " + std::to_string(r) + ": pre_process must run on pipeline stage 0 and post_process on stage " +
           std::to_string(plan.pp - 1));
  }
  return out;
}

}  // namespace impl
using namespace impl;

schedule::ModelDims schedule_dims(const ModelConfig& cfg, int micro_batch, int seq_len) {
  schedule::ModelDims d;
  d.hidden = cfg.hidden;
  d.ffn_hidden = cfg.ffn_hidden;
  d.num_heads = cfg.num_heads;
  d.num_kv_heads = cfg.num_kv_heads;
  d.head_dim = cfg.head_dim;
  d.mamba_state = cfg.mamba_state_dim;
  d.mamba_head_dim = cfg.mamba_head_dim;
  d.mamba_num_heads = cfg.mamba_num_heads;
  d.mamba_groups = cfg.mamba_num_groups;
  d.conv_kernel = cfg.mamba_conv_kernel;
  // The schedule's GDN heads are the value heads, with the query/key heads beside them.
  d.gdn_num_heads = cfg.gdn_num_v_heads;
  d.gdn_head_dim = cfg.gdn_head_dim_v;
  d.gdn_key_heads = cfg.gdn_num_heads;
  d.gdn_key_head_dim = cfg.gdn_head_dim_qk;
  d.num_experts = cfg.num_experts;
  d.top_k = cfg.moe_topk;
  d.moe_ffn_hidden = cfg.moe_ffn_hidden;
  d.shared_expert_ffn = cfg.moe_shared_ffn_hidden;
  d.vocab = cfg.vocab_size;
  d.seq_len = seq_len;
  d.micro_batch = micro_batch;
  d.bytes_per_element = 4;  // the engine computes and communicates in float32
  d.q_lora_rank = std::max(1, cfg.mla_q_lora_rank);
  d.kv_lora_rank = std::max(1, cfg.mla_kv_lora_rank);
  d.window = std::max(1, cfg.window);
  d.mla_rope_head_dim = cfg.mla_qk_pos_head_dim;
  d.mla_v_head_dim = cfg.mla_v_head_dim;
  d.mla_qk_head_dim = cfg.mla_qk_head_dim;
  return d;
}

struct Executor::Impl {
  patterns::ParsedPattern pattern;
  ModelConfig cfg;
  schedule::Plan plan;
  ExecutorOptions options;
  int nranks = 1;
  int local_experts = 0;
  StageLayout stages;
  std::vector<RankModel> models;
  std::vector<AdamWState<float>> adam;  // per rank

  const RankLayout& at(int rank) const { return stages.ranks.at(static_cast<std::size_t>(rank)); }
  int rank_of(int pp_rank, int dp_rank) const { return pp_rank * plan.dp + dp_rank; }

  // Every parameter is initialised from (seed, its canonical name), so a rank that builds only
  // its stage's layers holds the same values as the single-stage model.
  RankModel build_rank(std::uint64_t seed, const RankLayout& lo) const {
    RankModel m;
    const float std = cfg.init_std;
    m.first = lo.first;
    m.last = lo.last;
    if (m.first) {
      m.wte = Tf({cfg.vocab_size, cfg.hidden});
      Rng rng(seed, "embedding");
      for (auto& v : m.wte.data) v = static_cast<float>(rng.normal()) * std;
      m.wte_g = Tf(m.wte.shape);
    }
    if (m.last) {
      m.out_w = Tf({cfg.vocab_size, cfg.hidden});
      Rng rng(seed, "output_layer");
      for (auto& v : m.out_w.data) v = static_cast<float>(rng.normal()) * std;
      m.out_w_g = Tf(m.out_w.shape);
      m.final_norm = ones(cfg.hidden);
      m.final_norm_g = Tf({cfg.hidden});
      m.final_norm_key = patterns::final_norm_prefix(pattern) + "weight";
    }
    const auto keys = patterns::layer_keys(pattern);
    std::size_t phys = 0, logical = 0;
    for (const auto& item : pattern.items()) {
      LogicalLayer layer;
      layer.held = lo.holds.at(logical++) != 0;
      if (!layer.held) {
        phys += item.symbols.size();
        m.layers.push_back(std::move(layer));
        continue;
      }
      for (std::size_t i = 0; i < item.symbols.size(); ++i, ++phys)
        add_block(layer, item.symbols[i], static_cast<int>(phys), keys.at(phys).key_prefix,
                  "layers." + std::to_string(phys) + ".", seed);
      check_terminal(layer, "logical layer '" + item.symbols + "'");
      m.layers.push_back(std::move(layer));
    }
    // MTP depths live with the loss on the last stage; their parameters are named and drawn as
    // HybridModel's (keys are the canonical names there too).
    if (m.last) {
      const auto prefixes = patterns::mtp_layer_prefixes(pattern);
      for (int d = 0; d < pattern.mtp_depths; ++d) {
        MtpDepth md;
        md.prefix = prefixes.at(static_cast<std::size_t>(d));
        md.enorm = ones(cfg.hidden);
        md.hnorm = ones(cfg.hidden);
        md.final_norm = ones(cfg.hidden);
        md.eh_proj = Tf({cfg.hidden, 2 * cfg.hidden});
        Rng rng(seed, md.prefix + "eh_proj");
        for (auto& v : md.eh_proj.data) v = static_cast<float>(rng.normal()) * std;
        md.enorm_g = Tf({cfg.hidden});
        md.hnorm_g = Tf({cfg.hidden});
        md.final_norm_g = Tf({cfg.hidden});
        md.eh_proj_g = Tf(md.eh_proj.shape);
        md.layer.held = true;
        md.layer.loss_scale = 1.0f / static_cast<float>(pattern.mtp_depths);
        const auto inner = patterns::mtp_inner_prefixes(pattern, d);
        for (std::size_t j = 0; j < pattern.mtp_items.size(); ++j)
          add_block(md.layer, pattern.mtp_items[j].symbols.at(0), -1, inner[j], inner[j], seed);
        // The plan runs a depth as one layer plan (reference 3.4), split like a group.
        check_terminal(md.layer, "the MTP depth pattern '" + pattern.mtp + "' (one layer plan per depth)");
        m.mtp.push_back(std::move(md));
      }
    }
    return m;
  }

  void add_block(LogicalLayer& layer, char sym, int physical, const std::string& key_prefix,
                 const std::string& canonical_prefix, std::uint64_t seed) const {
    Block b;
    b.symbol = sym;
    b.physical = physical;
    b.key_prefix = key_prefix;
    b.canonical_prefix = canonical_prefix;
    b.norm_w = ones(cfg.hidden);
    b.norm_g = Tf({cfg.hidden});
    Rng rng(seed, b.canonical_prefix);
    try {
      if (sym == 'E') {
        b.moe = std::make_unique<MoeLayer>();
        moe_init(b.moe->p, cfg, rng);
        b.moe->g = detail::zeros_like(b.moe->p);
      } else {
        b.member = detail::make_member(sym, cfg, rng);
      }
    } catch (const std::invalid_argument& e) {
      throw EngineError(ErrorCode::BadConfig, e.what());
    }
    if ((sym == '-' || sym == 'E') && layer.terminal < 0) layer.terminal = static_cast<int>(layer.blocks.size());
    layer.blocks.push_back(std::move(b));
  }
  static void check_terminal(const LogicalLayer& layer, const std::string& what) {
    if (layer.terminal >= 0 && layer.terminal + 1 != static_cast<int>(layer.blocks.size()))
      fail(what + " has its MLP/MoE before the last member (rule O1)");
  }

  // ---- block helpers (same arithmetic as HybridModel's Block) ----
  void block_forward(Block& b, BlockState& s, Tf& h) const {
    s.h_in = h;
    rmsnorm_forward(s.normed, s.nc, s.h_in, b.norm_w, cfg.norm_eps);
    b.member->forward(s.normed, s.out, *s.ms);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += s.out[i];
  }
  void block_backward(Block& b, BlockState& s, Tf& dh, WgradSink<float>* w) const {
    Tf dnormed(s.normed.shape);
    b.member->backward(s.normed, dh, dnormed, *s.ms, w);
    rmsnorm_backward(dh, s.norm_g_staged, dnormed, s.h_in, b.norm_w, s.nc);
  }
  static void flush_norm(Block& b, BlockState& s) {
    for (std::size_t i = 0; i < b.norm_g.size(); ++i) b.norm_g[i] += s.norm_g_staged[i];
  }

  LayerState new_layer_state(LogicalLayer& layer) const {
    LayerState ls;
    for (auto& b : layer.blocks) {
      BlockState bs;
      bs.norm_g_staged = Tf({cfg.hidden});
      if (b.member) bs.ms = b.member->new_state();
      ls.blocks.push_back(std::move(bs));
    }
    if (layer.moe()) {
      ls.moe = std::make_unique<MoeState>();
      ls.moe->staged = detail::zeros_like(layer.blocks.back().moe->p);
    }
    return ls;
  }
  MtpState new_mtp_state(MtpDepth& md) const {
    MtpState ms;
    ms.inner = new_layer_state(md.layer);
    ms.eh_proj_staged = Tf(md.eh_proj.shape);
    ms.enorm_staged = Tf({cfg.hidden});
    ms.hnorm_staged = Tf({cfg.hidden});
    return ms;
  }

  // ---- expert-parallel exchange ----
  // My permuted rows (global expert-major) -> the rows my local experts process (expert-major,
  // sources in rank order inside each expert). `layout` is filled on the forward dispatch and
  // reused by the three later exchanges of the same layer and microbatch.
  void exchange_to_experts(runtime::Communicator& comm, const MoeRouting<float>& r,
                           const std::vector<float>& rows, EpLayout& layout, bool fill_layout,
                           std::vector<float>& expert_major, const char* label) const {
    const std::size_t c = static_cast<std::size_t>(cfg.hidden);
    const int n = comm.size();
    std::vector<std::vector<float>> send(static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) {
      const auto lo = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>(p * local_experts)]);
      const auto hi = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>((p + 1) * local_experts)]);
      send[static_cast<std::size_t>(p)].assign(rows.begin() + static_cast<long>(lo * c),
                                               rows.begin() + static_cast<long>(hi * c));
    }
    if (fill_layout) {
      std::vector<std::vector<std::uint64_t>> cnt(static_cast<std::size_t>(n));
      for (int p = 0; p < n; ++p)
        for (int le = 0; le < local_experts; ++le)
          cnt[static_cast<std::size_t>(p)].push_back(
              static_cast<std::uint64_t>(r.tokens_per_expert[static_cast<std::size_t>(p * local_experts + le)]));
      // Sizes are known (local_experts counts per peer): one collective, no size exchange.
      layout.counts.assign(static_cast<std::size_t>(n), std::vector<std::uint64_t>(static_cast<std::size_t>(local_experts)));
      runtime::mark_span_cpu("pre_cpu_us");
      comm.all_to_all_v<std::uint64_t>(spans_of<const std::uint64_t>(cnt), spans_of<std::uint64_t>(layout.counts),
                                       "dispatch counts");
      expert_major_rows(layout.counts, local_experts, layout.offset, layout.expert_start);
    }
    // Receive sizes follow from the layout: one collective for the payload.
    std::vector<std::vector<float>> recv(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) {
      std::size_t rows_from_s = 0;
      for (int le = 0; le < local_experts; ++le) rows_from_s += layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
      recv[static_cast<std::size_t>(s)].resize(rows_from_s * c);
    }
    annotate_sent(comm, send);
    runtime::mark_span_cpu("pre_cpu_us");
    comm.all_to_all_v<float>(spans_of<const float>(send), spans_of<float>(recv), label);
    expert_major.assign(layout.expert_start.back() * c, 0.0f);
    for (int s = 0; s < n; ++s) {
      std::size_t src = 0;
      for (int le = 0; le < local_experts; ++le) {
        const std::size_t cnt = layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
        const std::size_t dst = layout.offset[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
        if (src + cnt > recv[static_cast<std::size_t>(s)].size() / c) fail("all-to-all delivered fewer rows than announced");
        std::copy_n(recv[static_cast<std::size_t>(s)].begin() + static_cast<long>(src * c), cnt * c,
                    expert_major.begin() + static_cast<long>(dst * c));
        src += cnt;
      }
    }
  }

  // The inverse: expert-major rows back to the ranks whose tokens they are, in their permuted order.
  void exchange_to_tokens(runtime::Communicator& comm, const MoeRouting<float>& r, const EpLayout& layout,
                          const std::vector<float>& expert_major, std::vector<float>& rows, std::size_t my_rows,
                          const char* label) const {
    const std::size_t c = static_cast<std::size_t>(cfg.hidden);
    const int n = comm.size();
    std::vector<std::vector<float>> send(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s)
      for (int le = 0; le < local_experts; ++le) {
        const std::size_t cnt = layout.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
        const std::size_t off = layout.offset[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)];
        auto& out = send[static_cast<std::size_t>(s)];
        out.insert(out.end(), expert_major.begin() + static_cast<long>(off * c),
                   expert_major.begin() + static_cast<long>((off + cnt) * c));
      }
    // Rows come back from each peer in the number this rank sent it (its experts' slice of the
    // permuted order), straight into place: one collective, no size exchange.
    rows.assign(my_rows * c, 0.0f);
    std::vector<std::span<float>> recv;
    for (int p = 0; p < n; ++p) {
      const auto lo = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>(p * local_experts)]);
      const auto hi = static_cast<std::size_t>(r.expert_offset[static_cast<std::size_t>((p + 1) * local_experts)]);
      if (hi * c > rows.size()) fail("all-to-all routing addresses more rows than this rank has");
      recv.emplace_back(rows.data() + lo * c, (hi - lo) * c);
    }
    annotate_sent(comm, send);
    runtime::mark_span_cpu("pre_cpu_us");
    comm.all_to_all_v<float>(spans_of<const float>(send), recv, label);
  }

  // ---- node actions ----
  void pre_process_forward(RankModel& m, ChunkState& cs) const {
    embedding_forward(cs.h, cs.batch->tokens, m.wte);
  }
  void pre_process_backward(RankModel& m, ChunkState& cs) const {
    embedding_backward(m.wte_g, cs.dh, cs.batch->tokens);
  }

  void pre_dispatch_forward(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
    for (int i = 0; i < layer.pre_count(); ++i)
      block_forward(layer.blocks[static_cast<std::size_t>(i)], ls.blocks[static_cast<std::size_t>(i)], cs.h);
    if (!layer.moe()) return;
    Block& b = layer.blocks.back();
    BlockState& bs = ls.blocks.back();
    MoeState& st = *ls.moe;
    bs.h_in = cs.h;  // parked residual
    rmsnorm_forward(bs.normed, bs.nc, bs.h_in, b.norm_w, cfg.norm_eps);
    const int n = static_cast<int>(bs.normed.size() / static_cast<std::size_t>(cfg.hidden));
    moe_route_permute<float>(cfg, b.moe->p, bs.normed.ptr(), n, layer.loss_scale, st.routing, st.permuted_in);
    if (b.moe->p.has_shared) {
      st.shared_out.assign(bs.normed.size(), 0.0f);
      swiglu_forward<float>(st.shared_out.data(), st.shared_cache, bs.normed.ptr(), n, b.moe->p.shared);
    }
  }

  void mlp_forward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank) const {
    if (layer.terminal < 0) return;
    Block& b = layer.blocks.back();
    if (!layer.moe()) {
      block_forward(b, ls.blocks.back(), cs.h);
      return;
    }
    MoeState& st = *ls.moe;
    const int c = cfg.hidden;
    runtime::annotate_span("rows", std::to_string(st.layout.expert_start.back()));  // expert load
    st.expert_out.assign(st.expert_in.size(), 0.0f);
    st.expert_caches.resize(static_cast<std::size_t>(local_experts));
    for (int le = 0; le < local_experts; ++le) {
      const std::size_t lo = st.layout.expert_start[static_cast<std::size_t>(le)];
      const std::size_t hi = st.layout.expert_start[static_cast<std::size_t>(le) + 1];
      swiglu_forward<float>(st.expert_out.data() + lo * static_cast<std::size_t>(c), st.expert_caches[static_cast<std::size_t>(le)],
                            st.expert_in.data() + lo * static_cast<std::size_t>(c), static_cast<int>(hi - lo),
                            b.moe->p.experts[static_cast<std::size_t>(ep_rank * local_experts + le)]);
    }
  }

  void combine_forward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
    Block& b = layer.blocks.back();
    BlockState& bs = ls.blocks.back();
    MoeState& st = *ls.moe;
    bs.out = Tf(bs.h_in.shape);
    moe_unpermute_combine<float>(st.routing, st.permuted_out, bs.out.ptr(), cfg.hidden);
    if (b.moe->p.has_shared)
      for (std::size_t i = 0; i < bs.out.size(); ++i) bs.out[i] += st.shared_out[i];
    cs.h = bs.h_in;
    for (std::size_t i = 0; i < cs.h.size(); ++i) cs.h[i] += bs.out[i];
  }

  // The heads: the main one, then one per MTP depth with the shared output layer (reference
  // 3.4: PostProcessNode splits the concatenated hidden states in process_mtp_loss). With MTP the
  // final norm already ran in the first depth's pre_dispatch.
  void post_process_forward(RankModel& m, ChunkState& cs) const {
    if (m.mtp.empty()) rmsnorm_forward(cs.h_final, cs.fnc, cs.h, m.final_norm, cfg.norm_eps);
    output_forward(cs.logits, cs.h_final, m.out_w);
    cs.lm_weights = Tf(cs.batch->targets.shape);
    std::fill(cs.lm_weights.data.begin(), cs.lm_weights.data.end(), cs.weight);
    cs.loss += static_cast<double>(cross_entropy_forward(cs.ce, cs.logits, cs.batch->targets, cs.lm_weights));
    for (auto& ms : cs.mtp) {
      output_forward(ms.logits, ms.hout, m.out_w);
      ms.loss = static_cast<double>(cross_entropy_forward(ms.ce, ms.logits, ms.targets, ms.weights));
    }
  }
  // The output layer's gradient sums the heads last depth first, then the main head (as
  // HybridModel::backward). Each head's hidden-state gradient is its first contribution to a
  // parked tensor; the depth that consumed it adds the second before the producer runs.
  void post_process_backward(RankModel& m, ChunkState& cs) const {
    for (auto it = cs.mtp.rbegin(); it != cs.mtp.rend(); ++it) {
      Tf dlogits(it->logits.shape);
      cross_entropy_backward(dlogits, it->logits, it->targets, it->weights, it->ce, 1.0f);
      it->d_hout = Tf(it->hout.shape);
      output_backward(it->d_hout, m.out_w_g, dlogits, it->hout, m.out_w);
    }
    Tf dlogits(cs.logits.shape);
    cross_entropy_backward(dlogits, cs.logits, cs.batch->targets, cs.lm_weights, cs.ce, 1.0f);
    Tf dhf(cs.h_final.shape);
    output_backward(dhf, m.out_w_g, dlogits, cs.h_final, m.out_w);
    if (!m.mtp.empty()) {
      cs.d_h_final = std::move(dhf);
      return;
    }
    cs.dh = Tf(cs.h.shape);
    rmsnorm_backward(cs.dh, m.final_norm_g, dhf, cs.h, m.final_norm, cs.fnc);
  }

  // ---- MTP depths (reference 3.4) ----
  // pre_dispatch of depth d: the first depth applies the main final norm (the chunk's decoder
  // output) and parks h_final; every depth embeds its rolled tokens, projects cat(enorm(emb),
  // hnorm(h)) and runs its inner layer's pre_dispatch on the result.
  void mtp_pre_dispatch_forward(RankModel& m, int d, ChunkState& cs) const {
    MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
    MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
    const float eps = cfg.norm_eps;
    if (d == 0) {
      cs.h_pre_final = cs.h;
      rmsnorm_forward(cs.h_final, cs.fnc, cs.h_pre_final, m.final_norm, eps);
    }
    const MtpState* prev = d == 0 ? nullptr : &cs.mtp[static_cast<std::size_t>(d - 1)];
    // Depth d sees tokens rolled d + 1 steps left and predicts the token d + 1 ahead.
    ms.ids = roll_left(prev ? prev->ids : cs.batch->tokens);
    ms.targets = roll_left(prev ? prev->targets : cs.batch->targets);
    const int b = cs.batch->tokens.dim(0), t = cs.batch->tokens.dim(1), n = b * t, c = cfg.hidden;
    ms.weights = Tf({b, t});
    const float w = cs.mtp_weight[static_cast<std::size_t>(d)];
    for (int i = 0; i < b; ++i)
      for (int j = 0; j + d + 1 < t; ++j) ms.weights[static_cast<std::size_t>(i * t + j)] = w;
    embedding_forward(ms.emb, ms.ids, m.wte);
    rmsnorm_forward(ms.en, ms.enc, ms.emb, md.enorm, eps);
    ms.hin = prev ? prev->hout : cs.h_final;
    rmsnorm_forward(ms.hn, ms.hnc, ms.hin, md.hnorm, eps);
    // Embedding half first, as Megatron concatenates.
    ms.cat = Tf({b, t, 2 * c});
    for (int r = 0; r < n; ++r) {
      std::copy_n(ms.en.ptr() + static_cast<long>(r) * c, c, ms.cat.ptr() + static_cast<long>(r) * 2 * c);
      std::copy_n(ms.hn.ptr() + static_cast<long>(r) * c, c, ms.cat.ptr() + static_cast<long>(r) * 2 * c + c);
    }
    cs.h = Tf({b, t, c});
    cpu::linear_forward<float>(cs.h.ptr(), ms.cat.ptr(), md.eh_proj.ptr(), nullptr, n, 2 * c, c);
    pre_dispatch_forward(md.layer, ms.inner, cs);
  }
  void mtp_post_forward(RankModel& m, int d, ChunkState& cs) const {
    MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
    ms.pre = cs.h;
    rmsnorm_forward(ms.hout, ms.fnc, ms.pre, m.mtp[static_cast<std::size_t>(d)].final_norm, cfg.norm_eps);
  }
  // d_hout is complete here: its head (post_process) and the next depth's pre_dispatch, which
  // both ran before, have added their parts.
  void mtp_post_backward(RankModel& m, int d, ChunkState& cs) const {
    MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
    MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
    cs.dh = Tf(ms.pre.shape);
    rmsnorm_backward(cs.dh, md.final_norm_g, ms.d_hout, ms.pre, md.final_norm, ms.fnc);
  }
  void mtp_pre_dispatch_backward(RankModel& m, int d, ChunkState& cs, WgradSink<float>* w) const {
    MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
    MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
    pre_dispatch_backward(md.layer, ms.inner, cs, w);
    const int c = cfg.hidden;
    const int n = static_cast<int>(ms.cat.size() / static_cast<std::size_t>(2 * c));
    Tf dcat(ms.cat.shape);
    cpu::linear_backward<float>(dcat.ptr(), ms.eh_proj_staged.ptr(), nullptr, cs.dh.ptr(), ms.cat.ptr(), md.eh_proj.ptr(),
                                n, 2 * c, c, w);
    Tf den(ms.en.shape), dhn(ms.hn.shape);
    for (int r = 0; r < n; ++r) {
      std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c, c, den.ptr() + static_cast<long>(r) * c);
      std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c + c, c, dhn.ptr() + static_cast<long>(r) * c);
    }
    Tf demb(ms.emb.shape);
    rmsnorm_backward(demb, ms.enorm_staged, den, ms.emb, md.enorm, ms.enc);
    embedding_backward(m.wte_g, demb, ms.ids);
    Tf dhin(ms.hin.shape);
    rmsnorm_backward(dhin, ms.hnorm_staged, dhn, ms.hin, md.hnorm, ms.hnc);
    // Second consumer of the parked hidden state this depth read: merge into its gradient.
    Tf& parked = d == 0 ? cs.d_h_final : cs.mtp[static_cast<std::size_t>(d - 1)].d_hout;
    if (!options.test_drop_mtp_grad)
      for (std::size_t i = 0; i < parked.size(); ++i) parked[i] += dhin[i];
    if (d > 0) return;
    // The first depth produced h_final: the final norm's backward runs once, merged.
    cs.dh = Tf(cs.h_pre_final.shape);
    rmsnorm_backward(cs.dh, m.final_norm_g, cs.d_h_final, cs.h_pre_final, m.final_norm, cs.fnc);
  }
  void mtp_pre_dispatch_weight(RankModel& m, int d, ChunkState& cs) const {
    MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
    MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
    pre_dispatch_weight(md.layer, ms.inner);
    add_tensor(md.eh_proj_g, ms.eh_proj_staged);
    add_tensor(md.enorm_g, ms.enorm_staged);
    add_tensor(md.hnorm_g, ms.hnorm_staged);
  }

  void combine_backward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
    MoeState& st = *ls.moe;
    const int c = cfg.hidden;
    // forward: h_out = residual + routed + shared; the residual and the shared output were
    // parked by pre_dispatch, so each gets its gradient here and is merged there.
    st.d_residual = cs.dh;
    if (options.test_drop_residual_grad) st.d_residual.zero();
    st.d_shared = cs.dh;
    st.dperm_out.assign(st.permuted_out.size(), 0.0f);
    st.dw.assign(static_cast<std::size_t>(st.routing.n) * static_cast<std::size_t>(st.routing.k), 0.0f);
    moe_combine_backward<float>(st.routing, st.permuted_out, cs.dh.ptr(), c, st.dperm_out, st.dw);
    (void)layer;
  }

  void mlp_backward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank, WgradSink<float>* w) const {
    if (layer.terminal < 0) return;
    Block& b = layer.blocks.back();
    if (!layer.moe()) {
      block_backward(b, ls.blocks.back(), cs.dh, w);
      return;
    }
    MoeState& st = *ls.moe;
    const std::size_t c = static_cast<std::size_t>(cfg.hidden);
    runtime::annotate_span("rows", std::to_string(st.layout.expert_start.back()));
    st.dexpert_in.assign(st.expert_in.size(), 0.0f);
    for (int le = 0; le < local_experts; ++le) {
      const std::size_t lo = st.layout.expert_start[static_cast<std::size_t>(le)];
      const std::size_t hi = st.layout.expert_start[static_cast<std::size_t>(le) + 1];
      const auto e = static_cast<std::size_t>(ep_rank * local_experts + le);
      swiglu_backward<float>(st.dexpert_in.data() + lo * c, st.staged.experts[e], st.dexpert_out.data() + lo * c,
                             st.expert_in.data() + lo * c, static_cast<int>(hi - lo), b.moe->p.experts[e],
                             st.expert_caches[static_cast<std::size_t>(le)], w);
    }
  }

  void pre_dispatch_backward(LogicalLayer& layer, LayerState& ls, ChunkState& cs, WgradSink<float>* w) const {
    if (layer.moe()) {
      Block& b = layer.blocks.back();
      BlockState& bs = ls.blocks.back();
      MoeState& st = *ls.moe;
      const int n = st.routing.n;
      // Same order as moe_backward: shared expert, then unpermute + router, into d(normed).
      Tf dnormed(bs.normed.shape);
      if (b.moe->p.has_shared)
        swiglu_backward<float>(dnormed.ptr(), st.staged.shared, st.d_shared.ptr(), bs.normed.ptr(), n,
                               b.moe->p.shared, st.shared_cache, w);
      moe_route_permute_backward<float>(cfg, b.moe->p, bs.normed.ptr(), st.routing, layer.loss_scale, st.dperm_in, st.dw,
                                        dnormed.ptr(), st.staged);
      cs.dh = st.d_residual;  // the merged gradient of the parked residual...
      rmsnorm_backward(cs.dh, bs.norm_g_staged, dnormed, bs.h_in, b.norm_w, bs.nc);  // ...plus the norm path
    }
    for (int i = layer.pre_count() - 1; i >= 0; --i)
      block_backward(layer.blocks[static_cast<std::size_t>(i)], ls.blocks[static_cast<std::size_t>(i)], cs.dh, w);
  }

  // Flushes (the end of a slot's weight-gradient step, weight_steps.hpp): staged gradients into
  // the parameters' gradients.
  void pre_dispatch_weight(LogicalLayer& layer, LayerState& ls) const {
    for (int i = 0; i < layer.pre_count(); ++i) {
      Block& b = layer.blocks[static_cast<std::size_t>(i)];
      BlockState& bs = ls.blocks[static_cast<std::size_t>(i)];
      flush_norm(b, bs);
      b.member->flush(*bs.ms);
    }
    if (layer.moe()) {
      Block& b = layer.blocks.back();
      flush_norm(b, ls.blocks.back());
      add_tensor(b.moe->g.router, ls.moe->staged.router);
      if (b.moe->p.has_shared) {
        add_tensor(b.moe->g.shared.fc1, ls.moe->staged.shared.fc1);
        add_tensor(b.moe->g.shared.fc2, ls.moe->staged.shared.fc2);
      }
    }
  }
  static std::vector<ParamRef<float>> owned(Executor& ex, int rank);

  // The other end of a pipeline send or receive (its PointToPoint collective).
  const schedule::Node& pipe_partner(const schedule::Node& node) const {
    const bool valid = node.collective >= 0 && node.collective < static_cast<int>(plan.collectives.size());
    const schedule::Collective* c = valid ? &plan.collectives[static_cast<std::size_t>(node.collective)] : nullptr;
    if (!c || c->kind != schedule::CollectiveKind::PointToPoint || c->nodes.size() != 2)
      fail("pipeline node " + node.label() + " has no point-to-point partner");
    const schedule::Node& peer = plan.node(c->nodes[0] == node.id ? c->nodes[1] : c->nodes[0]);
    const Slot want = node.slot == Slot::PipeSend ? Slot::PipeRecv : Slot::PipeSend;
    if (peer.slot != want || peer.phase != node.phase || peer.microbatch != node.microbatch || peer.rank == node.rank)
      fail("pipeline node " + node.label() + " is paired with " + peer.label() + " of rank " + std::to_string(peer.rank));
    return peer;
  }
  void mlp_weight(LogicalLayer& layer, LayerState& ls, int ep_rank) const {
    if (layer.terminal < 0) return;
    Block& b = layer.blocks.back();
    if (!layer.moe()) {
      flush_norm(b, ls.blocks.back());
      b.member->flush(*ls.blocks.back().ms);
      return;
    }
    for (int le = 0; le < local_experts; ++le) {
      const auto e = static_cast<std::size_t>(ep_rank * local_experts + le);
      add_tensor(b.moe->g.experts[e].fc1, ls.moe->staged.experts[e].fc1);
      add_tensor(b.moe->g.experts[e].fc2, ls.moe->staged.experts[e].fc2);
    }
  }
  static void add_tensor(Tf& dst, const Tf& src) {
    for (std::size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
  }
};

namespace {

// The ordered list of (value, grad, canonical, key, expert index or -1) of one rank.
struct ParamEntry {
  std::string key, canonical;
  Tf* value;
  Tf* grad;
  int expert = -1;
  int order = 0;  // place in the whole model: -1 embedding, the logical layer, then final norm, output
};

std::vector<ParamEntry> list_params(RankModel& m) {
  std::vector<ParamEntry> out;
  const int n_layers = static_cast<int>(m.layers.size());
  if (m.first)
    out.push_back({"embedding.word_embeddings.weight", "embedding.word_embeddings.weight", &m.wte, &m.wte_g, -1, -1});
  auto add_block = [&](Block& b, int order) {
    const std::string norm = layers::prenorm_name(b.symbol);
    out.push_back({b.key_prefix + norm, b.canonical_prefix + norm, &b.norm_w, &b.norm_g, -1, order});
    auto add = [&](const std::string& name, Tf& v, Tf& g) {
      out.push_back({b.key_prefix + name, b.canonical_prefix + name, &v, &g, expert_index(name), order});
    };
    if (b.member) b.member->for_each_param(add);
    if (b.moe) b.moe->for_each_param(add);
  };
  for (int l = 0; l < n_layers; ++l)
    for (auto& b : m.layers[static_cast<std::size_t>(l)].blocks) add_block(b, l);
  if (m.last) {
    out.push_back({m.final_norm_key, "decoder.final_norm.weight", &m.final_norm, &m.final_norm_g, -1, n_layers});
    out.push_back({"output_layer.weight", "output_layer.weight", &m.out_w, &m.out_w_g, -1, n_layers + 1});
  }
  // MTP depths last, in HybridModel's order; their keys are their canonical names.
  for (std::size_t d = 0; d < m.mtp.size(); ++d) {
    MtpDepth& md = m.mtp[d];
    const int order = n_layers + 2 + static_cast<int>(d);
    auto add = [&](const std::string& name, Tf& v, Tf& g, int expert) { out.push_back({name, name, &v, &g, expert, order}); };
    add(md.prefix + "enorm.weight", md.enorm, md.enorm_g, -1);
    add(md.prefix + "hnorm.weight", md.hnorm, md.hnorm_g, -1);
    add(md.prefix + "eh_proj.weight", md.eh_proj, md.eh_proj_g, -1);
    for (auto& b : md.layer.blocks) add_block(b, order);
    add(md.prefix + "final_layernorm.weight", md.final_norm, md.final_norm_g, -1);
  }
  return out;
}

// The whole model as DP column d holds it (rank (s, d) of every stage s), in HybridModel's
// parameter order: the order of every reduction over parameters (the global gradient norm) and
// of the checkpoint, whatever the pipeline split.
std::vector<std::pair<int, ParamEntry>> model_column(Executor::Impl& im, int d) {
  std::vector<std::pair<int, ParamEntry>> out;
  for (int s = 0; s < im.plan.pp; ++s) {
    const int r = im.rank_of(s, d);
    for (auto& e : list_params(im.models[static_cast<std::size_t>(r)])) out.emplace_back(r, std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  return out;
}

}  // namespace

Executor::Executor(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed,
                   schedule::Plan plan, ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  if (auto msg = unsupported_symbols(pattern); !msg.empty()) throw EngineError(ErrorCode::Unsupported, msg);
  if (auto msg = schedule::beyond_engines(plan); !msg.empty()) throw EngineError(ErrorCode::Unsupported, "executor: " + msg);
  if (pattern.mtp_depths > 0 && plan.overlap)  // the builder's O3, also for plans built without it
    fail("hybrid MTP ('/" + pattern.mtp + "') does not run with the EP all-to-all overlap: the overlap scheduler does "
         "not expand the MTP's nested stack (rule O3, reference section 4); use the sequential schedule");
  if (pattern.mtp_depths > 0 && plan.pp > 1)
    fail("MTP depths ('/" + pattern.mtp + "') with pp " + std::to_string(plan.pp) +
         " are not run by the executor yet (the last stage would need a copy of the embedding); use pp 1");
  if (auto msg = plan_mismatch(pattern, plan, cfg.num_experts); !msg.empty()) fail(msg);
  if (plan.pp < 1 || plan.vpp < 1 || plan.global_ranks() != plan.pp * plan.dp)
    fail("plan has " + std::to_string(plan.global_ranks()) + " ranks for pp " + std::to_string(plan.pp) + " x dp " +
         std::to_string(plan.dp));
  const bool has_moe = pattern.has_moe();
  options.link.validate();
  im.pattern = pattern;
  im.cfg = cfg;
  im.plan = std::move(plan);
  im.options = options;
  im.nranks = im.plan.global_ranks();
  im.local_experts = has_moe ? cfg.num_experts / im.plan.ep : 0;
  im.stages = read_layout(im.plan, pattern.logical_count(), pattern.mtp_depths);
  for (int r = 0; r < im.nranks; ++r) im.models.push_back(im.build_rank(seed, im.at(r)));
  im.adam.resize(static_cast<std::size_t>(im.nranks));
}

std::vector<ParamRef<float>> Executor::Impl::owned(Executor& ex, int rank) {
  std::vector<ParamRef<float>> out;
  for (auto& p : ex.parameters(rank))
    if (ex.owns(rank, p.canonical)) out.push_back(p);
  return out;
}

double Executor::optimizer_step(const AdamWConfig& cfg) {
  auto& im = *impl_;
  // One sum in a fixed order, whatever the pipeline split: DP column after column, each in the
  // model's parameter order; non-expert gradients (identical on every DP rank after the
  // all-reduce) from column 0 only, experts from their owners.
  double ss = 0;
  for (int d = 0; d < im.plan.dp; ++d)
    for (auto& [r, e] : model_column(im, d)) {
      if (!owns(r, e.canonical) || (e.expert < 0 && d != 0)) continue;
      for (float g : e.grad->data) ss += static_cast<double>(g) * static_cast<double>(g);
    }
  const double norm = std::sqrt(ss);
  const float clip = (cfg.clip_norm > 0 && norm > cfg.clip_norm) ? static_cast<float>(cfg.clip_norm / norm) : 1.0f;
  AdamWConfig no_clip = cfg;
  no_clip.clip_norm = 0;
  for (int r = 0; r < im.nranks; ++r) {
    auto params = Impl::owned(*this, r);
    if (clip != 1.0f)
      for (auto& p : params)
        for (auto& g : p.grad->data) g *= clip;
    adamw_step(no_clip, im.adam[static_cast<std::size_t>(r)], params);
  }
  return norm;
}

std::int64_t Executor::optimizer_steps() const { return impl_->adam.at(0).step; }

void Executor::save(const std::string& path) const {
  auto& im = *impl_;
  std::vector<std::pair<std::string, const Tf*>> tensors;
  for (int d = 0; d < im.plan.dp; ++d)
    for (auto& [r, p] : model_column(im, d)) {
      if (!owns(r, p.canonical) || (p.expert < 0 && d != 0)) continue;  // each tensor from its owner, once
      tensors.emplace_back("param/" + p.canonical, p.value);
      auto& st = im.adam[static_cast<std::size_t>(r)];
      if (auto it = st.exp_avg.find(p.canonical); it != st.exp_avg.end()) tensors.emplace_back("exp_avg/" + p.canonical, &it->second);
      if (auto it = st.exp_avg_sq.find(p.canonical); it != st.exp_avg_sq.end())
        tensors.emplace_back("exp_avg_sq/" + p.canonical, &it->second);
    }
  write_safetensors(path, tensors,
                    {{"format", "hybrid-twin-executor-checkpoint"}, {"version", "1"}, {"pattern", im.pattern.text},
                     {"optimizer_step", std::to_string(im.adam.at(0).step)}});
}

void Executor::load(const std::string& path) {
  auto& im = *impl_;
  SafetensorsFile f = read_safetensors(path);
  auto bad = [&](const std::string& why) { throw EngineError(ErrorCode::BadCheckpoint, path + ": " + why); };
  if (f.metadata["format"] != "hybrid-twin-executor-checkpoint") bad("not an executor checkpoint");
  std::int64_t step = 0;
  try {
    step = std::stoll(f.metadata.at("optimizer_step"));
  } catch (const std::exception&) {
    bad("missing or malformed optimizer_step");
  }
  // Validate everything before changing anything.
  std::size_t expected = 0;
  for (auto& column_entry : model_column(im, 0)) {  // every parameter of the model, once
    const ParamEntry& p = column_entry.second;
    auto it = f.tensors.find("param/" + p.canonical);
    if (it == f.tensors.end()) bad("missing parameter " + p.canonical);
    if (it->second.shape != p.value->shape) bad("parameter " + p.canonical + " has the wrong shape");
    ++expected;
    for (const char* kind : {"exp_avg/", "exp_avg_sq/"}) {
      auto m = f.tensors.find(kind + p.canonical);
      if (step > 0 && m == f.tensors.end()) bad(std::string("missing optimizer state ") + kind + p.canonical);
      if (m != f.tensors.end()) {
        if (m->second.shape != p.value->shape) bad(std::string("optimizer state ") + kind + p.canonical + " has the wrong shape");
        ++expected;
      }
    }
  }
  if (expected != f.tensors.size()) bad("holds tensors this model does not have");
  for (int r = 0; r < im.nranks; ++r) {
    auto& st = im.adam[static_cast<std::size_t>(r)];
    st = AdamWState<float>{};
    st.step = step;
    for (auto& p : parameters(r)) {
      *p.value = f.tensors.at("param/" + p.canonical);
      if (auto m = f.tensors.find("exp_avg/" + p.canonical); m != f.tensors.end()) st.exp_avg[p.canonical] = m->second;
      if (auto m = f.tensors.find("exp_avg_sq/" + p.canonical); m != f.tensors.end()) st.exp_avg_sq[p.canonical] = m->second;
    }
  }
}

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;
Executor& Executor::operator=(Executor&&) noexcept = default;

int Executor::ranks() const { return impl_->nranks; }
const schedule::Plan& Executor::plan() const { return impl_->plan; }

int Executor::data_ranks() const { return impl_->plan.dp; }
int Executor::pipeline_stage(int rank) const { return impl_->at(rank).pp_rank; }

std::vector<ParamRef<float>> Executor::parameters(int rank) {
  std::vector<ParamRef<float>> out;
  for (auto& e : list_params(impl_->models.at(static_cast<std::size_t>(rank))))
    out.push_back({e.key, e.canonical, e.value, e.grad});
  return out;
}

bool Executor::owns(int rank, const std::string& canonical) const {
  const auto& im = *impl_;
  const RankModel& m = im.models.at(static_cast<std::size_t>(rank));
  if (canonical == "embedding.word_embeddings.weight") return m.first;
  if (canonical == "decoder.final_norm.weight" || canonical == "output_layer.weight") return m.last;
  // "mtp.layers.<depth>.<...>": held by the last stage. "layers.<physical>.<...>": held when
  // the logical layer of that physical layer is.
  const std::string mtp_head = "mtp.layers.", head = "layers.";
  if (canonical.rfind(mtp_head, 0) == 0) {
    if (!m.last || m.mtp.empty()) return false;
  } else {
    if (canonical.rfind(head, 0) != 0) return false;
    int phys = 0;
    try {
      phys = std::stoi(canonical.substr(head.size()));
    } catch (const std::exception&) {
      return false;
    }
    bool held = false;
    for (const auto& layer : m.layers)
      for (const auto& b : layer.blocks) held |= b.physical == phys;
    if (!held) return false;
  }
  const int expert = expert_index(canonical);
  if (expert < 0 || im.local_experts == 0) return true;
  return expert / im.local_experts == im.at(rank).ep_rank;
}

double check_step_batches(const std::vector<std::vector<Batch>>& batches, int ranks, int microbatches, int vocab,
                          const std::string& who) {
  if (static_cast<int>(batches.size()) != ranks)
    throw EngineError(ErrorCode::BadInput, who + ": need batches for " + std::to_string(ranks) + " data-parallel ranks");
  double tokens = 0;
  for (const auto& rb : batches) {
    if (static_cast<int>(rb.size()) != microbatches)
      throw EngineError(ErrorCode::BadInput, who + ": need " + std::to_string(microbatches) + " microbatches per rank");
    for (const auto& b : rb) {
      if (b.tokens.rank() != 2 || b.tokens.shape != b.targets.shape)
        throw EngineError(ErrorCode::BadInput, "batch tokens and targets must both be (B, T)");
      for (const auto* ids : {&b.tokens.data, &b.targets.data})
        for (int id : *ids)
          if (id < 0 || id >= vocab)
            throw EngineError(ErrorCode::BadInput,
                              std::string(ids == &b.tokens.data ? "token" : "target") + " id outside the vocabulary");
      tokens += static_cast<double>(b.tokens.size());
    }
  }
  return tokens;
}

namespace {

// What one plan node of a rank does, as a closure on that rank's state (model `m`, its chunks,
// EP shard `ep`, the W ledger and its EP and pipeline communicators); the node's references are
// checked here (microbatch, layer, MoE).
runtime::Work node_work(Executor::Impl& im, const schedule::Node& node, RankModel& m,
                        std::vector<std::vector<ChunkState>>& rank_chunks, int ep, WeightSteps<CpuMemory, float>& steps,
                        runtime::Communicator& comm, runtime::Communicator& pipe) {
  if (node.microbatch < 0 || node.microbatch >= im.plan.microbatches)
    throw EngineError(ErrorCode::BadConfig,
                      "executor: node " + node.label() + " names microbatch " + std::to_string(node.microbatch));
  ChunkState& cs =
      rank_chunks[static_cast<std::size_t>(node.microbatch)][static_cast<std::size_t>(node.vp_stage)];
  // An MTP depth's dispatch, mlp and combine are its inner layer's; pre_dispatch and mtp_post
  // add the depth's own work around it.
  LogicalLayer* layer = nullptr;
  LayerState* ls = nullptr;
  const int depth = node.mtp ? node.layer : -1;
  if (node.mtp) {
    layer = &m.mtp.at(static_cast<std::size_t>(depth)).layer;
    ls = &cs.mtp.at(static_cast<std::size_t>(depth)).inner;
  } else if (node.layer >= 0) {
    layer = &m.layers.at(static_cast<std::size_t>(node.layer));
    ls = &cs.layers.at(static_cast<std::size_t>(node.layer));
  }
  if ((node.slot == Slot::Dispatch || node.slot == Slot::Combine) && (!layer || !layer->moe()))
    throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " is a comm node of a dense layer");
  if (node.layer < 0 && node.slot != Slot::PreProcess && node.slot != Slot::PostProcess && node.slot != Slot::PipeSend &&
      node.slot != Slot::PipeRecv)
    throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " names no layer");
  runtime::Work work;
  switch (node.slot) {
    case Slot::PreProcess:
      if (node.phase == Phase::Forward) work = [&im, &m, &cs] { im.pre_process_forward(m, cs); };
      else work = [&im, &m, &cs] { im.pre_process_backward(m, cs); };
      break;
    case Slot::PostProcess:
      if (node.phase == Phase::Forward) work = [&im, &m, &cs] { im.post_process_forward(m, cs); };
      else work = [&im, &m, &cs] { im.post_process_backward(m, cs); };
      break;
    case Slot::PreDispatch:
      if (node.mtp) {
        auto flush = [&im, &m, depth, &cs] { im.mtp_pre_dispatch_weight(m, depth, cs); };
        if (node.phase == Phase::Forward) work = [&im, &m, depth, &cs] { im.mtp_pre_dispatch_forward(m, depth, cs); };
        else if (node.phase == Phase::Backward)
          work = [&im, &m, depth, &cs, &steps, &node, flush] {
            steps.backward(node, [&](WgradSink<float>* w) { im.mtp_pre_dispatch_backward(m, depth, cs, w); }, flush);
          };
        else work = [&steps, &node, flush] { steps.weight(node, flush); };
        break;
      }
      if (node.phase == Phase::Forward) work = [&im, layer, ls, &cs] { im.pre_dispatch_forward(*layer, *ls, cs); };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, &steps, &node] {
          steps.backward(node, [&](WgradSink<float>* w) { im.pre_dispatch_backward(*layer, *ls, cs, w); },
                         [&] { im.pre_dispatch_weight(*layer, *ls); });
        };
      else work = [&im, layer, ls, &steps, &node] { steps.weight(node, [&] { im.pre_dispatch_weight(*layer, *ls); }); };
      break;
    case Slot::MtpPost:
      if (!node.mtp)
        throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " is mtp_post of a decoder layer");
      // The final norm's weight gradient is never delayed (the slot has no W node).
      if (node.phase == Phase::Forward) work = [&im, &m, depth, &cs] { im.mtp_post_forward(m, depth, cs); };
      else if (node.phase == Phase::Backward) work = [&im, &m, depth, &cs] { im.mtp_post_backward(m, depth, cs); };
      break;
    case Slot::Mlp:
      if (node.phase == Phase::Forward) work = [&im, layer, ls, &cs, ep] { im.mlp_forward_slot(*layer, *ls, cs, ep); };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, ep, &steps, &node] {
          steps.backward(node, [&](WgradSink<float>* w) { im.mlp_backward_slot(*layer, *ls, cs, ep, w); },
                         [&] { im.mlp_weight(*layer, *ls, ep); });
        };
      else work = [&im, layer, ls, ep, &steps, &node] { steps.weight(node, [&] { im.mlp_weight(*layer, *ls, ep); }); };
      break;
    case Slot::Dispatch:
      if (node.phase == Phase::Forward)
        work = [&im, ls, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_experts(comm, st.routing, st.permuted_in, st.layout, true, st.expert_in, "dispatch");
        };
      else if (node.phase == Phase::Backward)
        work = [&im, ls, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_tokens(comm, st.routing, st.layout, st.dexpert_in, st.dperm_in, st.permuted_in.size() / static_cast<std::size_t>(im.cfg.hidden),
                                "dispatch backward");
        };
      break;
    case Slot::Combine:
      if (node.phase == Phase::Forward)
        work = [&im, layer, ls, &cs, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_tokens(comm, st.routing, st.layout, st.expert_out, st.permuted_out,
                                st.permuted_in.size() / static_cast<std::size_t>(im.cfg.hidden), "combine");
          im.combine_forward_local(*layer, *ls, cs);
        };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, &comm] {
          im.combine_backward_local(*layer, *ls, cs);
          MoeState& st = *ls->moe;
          im.exchange_to_experts(comm, st.routing, st.dperm_out, st.layout, false, st.dexpert_out, "combine backward");
        };
      break;
    case Slot::PipeSend:
    case Slot::PipeRecv: {
      // Activations forward, their gradients backward, between neighbouring model chunks;
      // buffered send, blocking receive, both on the comm stream in plan order.
      const schedule::Node& peer = im.pipe_partner(node);
      const bool fwd = node.phase == Phase::Forward;
      const int recv_vp = node.slot == Slot::PipeSend ? peer.vp_stage : node.vp_stage;
      const int tag = (node.microbatch * im.plan.vpp + recv_vp) * 2 + (fwd ? 0 : 1);
      if (node.slot == Slot::PipeSend)
        work = [&pipe, &cs, fwd, to = peer.rank, tag] {
          const Tf& t = fwd ? cs.h : cs.dh;
          pipe.send<float>(to, tag, std::span<const float>(t.data), fwd ? "pipeline activations" : "pipeline gradients");
        };
      else
        work = [&pipe, &cs, fwd, from = peer.rank, tag, c = im.cfg.hidden] {
          Tf& t = fwd ? cs.h : cs.dh;
          std::vector<int> shape = cs.batch->tokens.shape;
          shape.push_back(c);
          t = Tf(shape);
          pipe.recv<float>(from, tag, std::span<float>(t.data), fwd ? "pipeline activations" : "pipeline gradients");
        };
      break;
    }
    default:
      throw EngineError(ErrorCode::BadConfig, std::string("executor: slot ") + std::string(schedule::to_string(node.slot)) +
                                                  " is not supported yet");
  }
  return work;
}

// The data-parallel all-reduce of a rank's non-expert gradients, in parameter order.
runtime::Work grad_all_reduce_work(const schedule::Node& node, RankModel& m, runtime::Communicator& dp_comm) {
  if (node.symbols == "expert") throw EngineError(ErrorCode::BadConfig, "executor: expert all-reduce (dp > ep) not supported");
  return [&m, &dp_comm] {
    std::vector<float> buf;
    auto params = list_params(m);
    for (auto& p : params)
      if (p.expert < 0) buf.insert(buf.end(), p.grad->data.begin(), p.grad->data.end());
    runtime::mark_span_cpu("pre_cpu_us");
    dp_comm.all_reduce_sum(buf.data(), buf.size(), "gradient all-reduce");
    std::size_t at = 0;
    for (auto& p : params)
      if (p.expert < 0) {
        std::copy_n(buf.begin() + static_cast<long>(at), p.grad->size(), p.grad->data.begin());
        at += p.grad->size();
      }
  };
}

}  // namespace

void Executor::zero_grad() {
  for (int r = 0; r < impl_->nranks; ++r)
    for (auto& p : parameters(r)) p.grad->zero();
}

StepResult Executor::step(const std::vector<std::vector<Batch>>& batches) {
  auto& im = *impl_;
  const int mbs = im.plan.microbatches, dp = im.plan.dp, pp = im.plan.pp, vpp = im.plan.vpp;
  const int n_layers = static_cast<int>(im.stages.layer_stage.size());
  const double tokens = check_step_batches(batches, dp, mbs, im.cfg.vocab_size, "executor");
  const float weight = static_cast<float>(1.0 / tokens);
  // MTP depth d: mtp_loss_scaling / depths over the step's valid positions (those with a token
  // d + 1 ahead), in HybridModel's float arithmetic, so one rank with one microbatch gives its
  // bits and any split of the same global batch the same weight.
  const int depths = im.pattern.mtp_depths;
  std::vector<float> mtp_weight(static_cast<std::size_t>(depths), 0.0f);
  for (int d = 0; d < depths; ++d) {
    long valid = 0;
    for (const auto& rb : batches)
      for (const auto& b : rb) valid += static_cast<long>(b.tokens.dim(0)) * std::max(0, b.tokens.dim(1) - (d + 1));
    if (valid > 0)
      mtp_weight[static_cast<std::size_t>(d)] = im.cfg.mtp_loss_scaling / static_cast<float>(depths) / static_cast<float>(valid);
  }

  runtime::CpuWorldOptions wo;
  wo.ranks = im.nranks;
  wo.link = im.options.link;
  wo.comm_realtime = im.options.comm_realtime;
  runtime::CpuWorld world(wo);
  // Per pipeline stage one EP group (all-to-alls) and one DP group (gradient all-reduce) over
  // its DP ranks (DP = EP: the same members, separate call sequences); one group of all ranks
  // carries the pipeline's point-to-point transfers, addressed by global rank.
  std::vector<std::vector<std::unique_ptr<runtime::Communicator>>> ep_comms, dp_comms;
  for (int s = 0; s < pp; ++s) {
    std::vector<int> members;
    for (int d = 0; d < dp; ++d) members.push_back(im.rank_of(s, d));
    ep_comms.push_back(world.transport().create_group("ep" + std::to_string(s), members));
    dp_comms.push_back(world.transport().create_group("dp" + std::to_string(s), members));
  }
  std::vector<int> everyone(static_cast<std::size_t>(im.nranks));
  for (int r = 0; r < im.nranks; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto pipe_comms = world.transport().create_group("pipeline", everyone);

  // chunks[rank][microbatch][vp_stage]
  std::vector<std::vector<std::vector<ChunkState>>> chunks(static_cast<std::size_t>(im.nranks));
  for (int r = 0; r < im.nranks; ++r) {
    const RankLayout& lo = im.at(r);
    auto& rc = chunks[static_cast<std::size_t>(r)];
    rc.resize(static_cast<std::size_t>(mbs));
    for (int mb = 0; mb < mbs; ++mb) {
      rc[static_cast<std::size_t>(mb)].resize(static_cast<std::size_t>(vpp));
      for (int vp = 0; vp < vpp; ++vp) {
        auto& cs = rc[static_cast<std::size_t>(mb)][static_cast<std::size_t>(vp)];
        cs.batch = &batches[static_cast<std::size_t>(lo.dp_rank)][static_cast<std::size_t>(mb)];
        cs.weight = weight;
        cs.layers.resize(static_cast<std::size_t>(n_layers));
        auto& model_layers = im.models[static_cast<std::size_t>(r)].layers;
        for (std::size_t l = 0; l < cs.layers.size(); ++l)
          if (lo.holds[l] && im.stages.layer_vp[l] == vp) cs.layers[l] = im.new_layer_state(model_layers[l]);
        if (lo.last && vp == vpp - 1) {
          for (auto& md : im.models[static_cast<std::size_t>(r)].mtp) cs.mtp.push_back(im.new_mtp_state(md));
          cs.mtp_weight = mtp_weight;
        }
      }
    }
  }
  // The W nodes' state (weight_steps.hpp). A slot the plan gives no W node (no delayed wgrad, or
  // nothing to delay: e.g. a lone 'E', whose router and norm gradients Megatron computes in the
  // backward itself) runs its weight GEMMs in its backward and flushes right after it.
  WeightSteps<CpuMemory, float> steps(im.plan, 0, im.nranks);

  // Each rank's host thread walks its own issue order (plan_walk.hpp), after a walk over every
  // rank that refuses a plan whose ranks would wait for each other forever.
  const auto issue = issue_orders(im.plan, im.options.test_weight_fault, kWho);
  refuse_deadlock(im.plan, issue, kWho);
  world.run([&](runtime::RankContext& ctx) {
    const int r = ctx.rank;
    const RankLayout& lo = im.at(r);
    const int ep = lo.ep_rank;  // which shard of the experts this rank holds
    RankModel& m = im.models[static_cast<std::size_t>(r)];
    runtime::Communicator& comm = *ep_comms[static_cast<std::size_t>(lo.pp_rank)][static_cast<std::size_t>(lo.dp_rank)];
    runtime::Communicator& dp_comm = *dp_comms[static_cast<std::size_t>(lo.pp_rank)][static_cast<std::size_t>(lo.dp_rank)];
    runtime::Communicator& pipe = *pipe_comms[static_cast<std::size_t>(r)];
    runtime::EventChains chains([&ctx] { return ctx.make_event(); });
    const auto run_node = [&](const schedule::Node& node) {
      runtime::Stream& stream = ctx.stream(node.stream == schedule::Stream::Comm ? runtime::kCommStream : runtime::kComputeStream);
      runtime::WorkLabel label{node.label(), std::string(schedule::to_string(node.slot)), schedule::node_args(node)};
      if (node.slot == Slot::GradAllReduce) {
        chains.wait_all(stream);
        stream.enqueue(grad_all_reduce_work(node, m, dp_comm), label);
        return;
      }
      runtime::Work work = node_work(im, node, m, chunks[static_cast<std::size_t>(r)], ep, steps, comm, pipe);
      if (!work) fail("node " + node.label() + " has no action");
      // The GEMM work the node did (cpu::gemm_flops, a counter of the stream's thread): where the
      // weight-gradient GEMMs ran, readable from the timeline.
      work = [inner = std::move(work)] {
        const double before = cpu::gemm_flops();
        inner();
        runtime::annotate_span("gemm_flops", flops_text(cpu::gemm_flops() - before));
      };
      chains.issue(runtime::ChainKey{node.microbatch, node.vp_stage}, stream, std::move(work), std::move(label));
    };
    // A range of one rank: its collectives go to it as it reaches them; the transport meets them.
    walk_plan(im.plan, issue, r, r + 1, kWho, run_node, [&](const std::vector<const schedule::Node*>& members) {
      for (const schedule::Node* node : members)
        if (node->rank == r) run_node(*node);
    });
  });
  steps.finish();

  // Losses per (DP rank, microbatch), summed as the single-stage run sums them: router losses
  // in layer order (from whichever stage holds the layer, MTP depths last), then the main loss
  // of the last stage, then the MTP depths' losses (HybridModel's LossBreakdown::total).
  StepResult result;
  result.loss.assign(static_cast<std::size_t>(dp), std::vector<double>(static_cast<std::size_t>(mbs), 0.0));
  for (int d = 0; d < dp; ++d)
    for (int mb = 0; mb < mbs; ++mb) {
      double aux = 0;
      for (int l = 0; l < n_layers; ++l) {
        const auto r = static_cast<std::size_t>(im.rank_of(im.stages.layer_stage[static_cast<std::size_t>(l)], d));
        const auto vp = static_cast<std::size_t>(im.stages.layer_vp[static_cast<std::size_t>(l)]);
        const auto& ls = chunks[r][static_cast<std::size_t>(mb)][vp].layers[static_cast<std::size_t>(l)];
        if (ls.moe) aux += static_cast<double>(ls.moe->routing.aux_loss) + static_cast<double>(ls.moe->routing.z_loss);
      }
      const auto last = static_cast<std::size_t>(im.rank_of(pp - 1, d));
      const ChunkState& head = chunks[last][static_cast<std::size_t>(mb)][static_cast<std::size_t>(vpp - 1)];
      for (const auto& ms : head.mtp)
        if (const MoeState* st = ms.inner.moe.get())
          aux += static_cast<double>(st->routing.aux_loss) + static_cast<double>(st->routing.z_loss);
      double total = head.loss + aux;
      for (const auto& ms : head.mtp) total += ms.loss;
      result.loss[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)] = total;
      result.total += total;
    }
  result.timeline = world.timeline();
  result.timeline.source = "engine";
  result.timeline.metadata["schedule"] = im.plan.schedule;
  result.timeline.metadata["pattern"] = im.plan.pattern;
  result.timeline.metadata["pp"] = std::to_string(pp);
  result.timeline.metadata["vpp"] = std::to_string(vpp);
  return result;
}

}  // namespace ht::engine::exec
