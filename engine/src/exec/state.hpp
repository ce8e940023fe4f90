// The CPU executor's internals (engine/src/exec; executor.hpp is the interface): what one rank
// holds (RankModel: its pipeline stage's blocks, the embedding, the output layer, MTP depths),
// the per-microbatch state of a model chunk (ChunkState), where each rank sits in the plan
// (StageLayout), and Executor::Impl, whose parts live by concept:
//   layout.cpp       the stage layout read from a plan, and the model description for the plan
//   rank_model.cpp   a rank's model built from the seed, and its per-microbatch state
//   ep_exchange.cpp  the expert-parallel all-to-alls (rows to the experts' ranks and back)
//   parameters.cpp   parameters in model order, ownership, the optimizer step, checkpoints
//   executor.cpp     the plan's node actions and the step (the walk, the streams)
#pragma once

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/exec/executor.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/engine/runtime/communicator.hpp"
#include "ht/engine/runtime/stream.hpp"
#include "ht/schedule/plan.hpp"
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
[[noreturn]] inline void fail(const std::string& message) { walk_fail(kWho, message); }

// FLOPs as an integer (span arguments are text).
inline std::string flops_text(double flops) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", flops);
  return text;
}

inline Tf ones(int n) {
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
  // By global logical layer, for the chunk's layers: each lives from the first node of its
  // (microbatch, chunk, layer) to the last (the W node under delayed wgrad), as the schedule's
  // memory walk counts it (schedule/memory.hpp); `router_loss` keeps its router losses (aux + z)
  // for the step's loss.
  std::vector<LayerState> layers;
  std::vector<double> router_loss;
  // MTP (last chunk of the last stage only): the first depth's pre_dispatch applies the final
  // norm and parks h_final for the main head and its own hnorm; d_h_final merges both gradients.
  std::vector<MtpState> mtp;
  std::vector<float> mtp_weight;  // CE weight per valid token, per depth
  Tf h_pre_final, d_h_final;
  // After the chunk's last node: its tensors go; the losses (loss, router_loss, the MTP depths')
  // stay for the step's sum.
  void release_tensors() {
    for (Tf* t : {&h, &dh, &h_final, &logits, &lm_weights, &h_pre_final, &d_h_final}) *t = Tf{};
    fnc = {};
    ce = {};
  }
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

StageLayout read_layout(const schedule::Plan& plan, int layers, int mtp_depths);

// The ordered list of (value, grad, canonical, key, expert index or -1) of one rank.
struct ParamEntry {
  std::string key, canonical;
  Tf* value;
  Tf* grad;
  int expert = -1;
  int order = 0;  // place in the whole model: -1 embedding, the logical layer, then final norm, output
};

}  // namespace impl
using namespace impl;

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

  // rank_model.cpp
  RankModel build_rank(std::uint64_t seed, const RankLayout& lo) const;
  // An 'E' block keeps only the experts of EP rank `ep_rank` (the others' tensors are empty).
  void add_block(LogicalLayer& layer, char sym, int physical, int ep_rank, const std::string& key_prefix,
                 const std::string& canonical_prefix, std::uint64_t seed) const;
  static void check_terminal(const LogicalLayer& layer, const std::string& what);
  LayerState new_layer_state(LogicalLayer& layer) const;
  MtpState new_mtp_state(MtpDepth& md) const;

  // ep_exchange.cpp
  void exchange_to_experts(runtime::Communicator& comm, const MoeRouting<float>& r, const std::vector<float>& rows,
                           EpLayout& layout, bool fill_layout, std::vector<float>& expert_major,
                           const char* label) const;
  void exchange_to_tokens(runtime::Communicator& comm, const MoeRouting<float>& r, const EpLayout& layout,
                          const std::vector<float>& expert_major, std::vector<float>& rows, std::size_t my_rows,
                          const char* label) const;

  // parameters.cpp: the parameters rank `rank` owns (the optimizer updates them there).
  static std::vector<ParamRef<float>> owned(Executor& ex, int rank);

  // executor.cpp: the node actions, slot by slot.
  void block_forward(Block& b, BlockState& s, Tf& h) const;
  void block_backward(Block& b, BlockState& s, Tf& dh, WgradSink<float>* w) const;
  static void flush_norm(Block& b, BlockState& s);
  static void add_tensor(Tf& dst, const Tf& src);
  void pre_process_forward(RankModel& m, ChunkState& cs) const;
  void pre_process_backward(RankModel& m, ChunkState& cs) const;
  void pre_dispatch_forward(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const;
  void pre_dispatch_backward(LogicalLayer& layer, LayerState& ls, ChunkState& cs, WgradSink<float>* w) const;
  void pre_dispatch_weight(LogicalLayer& layer, LayerState& ls) const;
  void mlp_forward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank) const;
  void mlp_backward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank, WgradSink<float>* w) const;
  void mlp_weight(LogicalLayer& layer, LayerState& ls, int ep_rank) const;
  void combine_forward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const;
  void combine_backward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const;
  void post_process_forward(RankModel& m, ChunkState& cs) const;
  void post_process_backward(RankModel& m, ChunkState& cs) const;
  void mtp_pre_dispatch_forward(RankModel& m, int d, ChunkState& cs) const;
  void mtp_pre_dispatch_backward(RankModel& m, int d, ChunkState& cs, WgradSink<float>* w) const;
  void mtp_pre_dispatch_weight(RankModel& m, int d, ChunkState& cs) const;
  void mtp_post_forward(RankModel& m, int d, ChunkState& cs) const;
  void mtp_post_backward(RankModel& m, int d, ChunkState& cs) const;
  const schedule::Node& pipe_partner(const schedule::Node& node) const;
};

// One rank's parameters in its model's order (embedding, layers, final norm, output, MTP).
std::vector<ParamEntry> list_params(RankModel& m);
// The whole model as DP column d holds it (rank (s, d) of every stage s), in HybridModel's
// parameter order.
std::vector<std::pair<int, ParamEntry>> model_column(Executor::Impl& im, int d);

}  // namespace ht::engine::exec
