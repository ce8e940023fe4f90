// The schedule builder (see build.hpp). It reads like reference section 3.6: a chunk-level run
// (pre_process, pairs of layers, leftovers, p2p, the deferred W, post_process) made of a
// layer-level run (the 13 steps), made of three verbs that emit the nodes of one slot: forward,
// backward and weight (and recompute, which replays forward work right before a backward).
// Ranks are built one after the other from the same step list, so the members of every
// collective sit at the same position of their ranks' sequences.
//
// Under tensor or context parallelism a compute slot becomes the nodes of its blocks
// (blocks.hpp): TP/SP all-gathers and reduce-scatters on the compute stream around each TP-split
// block, the CP ring exchange carried by the attention core's node (overlapped with it), Mamba/GDN
// head all-to-alls. With tp = cp = 1 every slot is one node, as before those existed.
//
// Gradient synchronisation (megatron-parallel.md 4): the end-of-step all-reduce on the comm
// stream, or Megatron's DDP: per-bucket reductions on the rank's dp stream (launched as the last
// microbatch's backward finishes each bucket, or after the whole backward), the optimizer step,
// and the distributed optimizer's parameter all-gathers (before the forward that needs them, or
// after the optimizer step).
#include "ht/schedule/build.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "blocks.hpp"
#include "ht/patterns/pipeline.hpp"
#include "ht/patterns/symbols.hpp"
#include "ht/schedule/costs.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/fold.hpp"
#include "ht/schedule/layer_shape.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/params.hpp"
#include "ht/schedule/pipeline_order.hpp"
#include "ht/schedule/plan_size.hpp"

namespace ht::schedule {
namespace {

using detail::Block;

struct LayerInfo {
  int index = 0;  // global logical layer, or MTP depth
  LayerShape shape;
};

struct Chunk {
  bool first = false;  // holds the embedding (first stage of the model)
  bool last = false;   // holds the loss (last stage of the model)
  std::vector<LayerInfo> layers;  // decoder layers, then MTP depths on the last stage
};

// Kernel lists shared by many nodes, numbered in order of first use.
class WorkTable {
 public:
  int intern(const std::vector<Kernel>& raw) { return raw.empty() ? -1 : insert(with_precision(raw, precision)); }
  // Work `id`'s kernels (already in the number format) and one more.
  int with(int id, const Kernel& extra) {
    std::vector<Kernel> kernels = works.at(static_cast<std::size_t>(id)).kernels;
    kernels.push_back(extra);
    return insert(kernels);
  }
  std::vector<Work> works;
  Precision precision = Precision::Bf16;

 private:
  int insert(const std::vector<Kernel>& kernels) {
    std::vector<double> key;
    key.reserve(kernels.size() * 9);
    for (const Kernel& k : kernels)
      key.insert(key.end(), {double(k.kind), double(k.delayable), k.m, k.n, k.k, k.groups, k.flops, k.bytes, double(k.fp8)});
    auto [it, fresh] = index_.try_emplace(std::move(key), static_cast<int>(works.size()));
    if (fresh) works.push_back({kernels});
    return it->second;
  }
  std::map<std::vector<double>, int> index_;
};

struct Context {
  const ModelDims& dims;
  const ParallelConfig& cfg;
  const ScheduleOptions& opt;
  int mtp_depths = 0;
  std::vector<std::vector<Chunk>> chunks;  // [pp_rank][vp_stage]
  Shard shard;
  WorkTable* works = nullptr;
  MoeRoute route;  // skew, the busiest rank's load, the dispatcher
  bool blocks() const { return cfg.tp > 1 || cfg.cp > 1; }
  bool megatron_sync() const { return cfg.optimizer.sync == GradSync::Megatron; }
};

// A pipeline transfer waiting for its partner on another rank.
struct P2pKey {
  int rank;  // receiving global rank
  Phase phase;
  int microbatch;
  int vp_stage;  // receiver's chunk
  auto operator<=>(const P2pKey&) const = default;
};

// Keys of a chunk's parameter groups: logical layers, MTP depth d as -2 - d, and these two.
constexpr int kEmbeddingKey = -1;
constexpr int kOutputKey = -1000000;

// Gradients of one rank's chunk that one DDP bucket holds, and what must finish first.
struct Bucket {
  bool expert = false;
  int vp_stage = 0;
  double elements = 0;
  std::vector<int> layers;  // parameter-group keys (above)
};

class RankBuilder {
 public:
  RankBuilder(const Context& ctx, int rank) : ctx_(ctx), rank_(rank), coords_(rank_coords(ctx.cfg, rank)) {
    for (Group g : {Group::Tp, Group::Cp, Group::Ep, Group::Etp, Group::Dp, Group::Edp})
      members_[static_cast<int>(g)] = group_members(ctx.cfg, rank, g);
  }

  // Chunk-level run (reference section 3.6, chunk level, steps 1-7).
  void run(const PipelineStep& step) {
    const auto& f = step.forward;
    const auto& b = step.backward;
    const Chunk* fc = f ? &chunk(f->vp_stage) : nullptr;
    const Chunk* bc = b ? &chunk(b->vp_stage) : nullptr;
    // 1. pre_forward (receive activations) and pre_process forward.
    if (f) {
      if (!fc->first) pipe_recv(Phase::Forward, *f);
      if (fc->first) process(Slot::PreProcess, Phase::Forward, *f);
    }
    // 2. pre_backward (receive gradients) and post_process backward.
    if (b) {
      if (!bc->last) pipe_recv(Phase::Backward, *b);
      if (bc->last) process(Slot::PostProcess, Phase::Backward, *b);
    }
    // 3. pairs: forward layers ascending, backward layers popped last-first.
    const int n_f = fc ? static_cast<int>(fc->layers.size()) : 0;
    const int n_b = bc ? static_cast<int>(bc->layers.size()) : 0;
    const int pairs = std::min(n_f, n_b);
    for (int i = 0; i < pairs; ++i) {
      const int j = n_b - 1 - i;
      run_layer(&fc->layers[i], f, &bc->layers[j], b, j == 0);
    }
    // 4. leftovers: remaining backward layers, then remaining forward layers.
    for (int j = n_b - 1 - pairs; j >= 0; --j) run_layer(nullptr, f, &bc->layers[j], b, j == 0);
    for (int i = pairs; i < n_f; ++i) run_layer(&fc->layers[i], f, nullptr, b, false);
    // 5. post_forward / post_backward p2p.
    if (f && !fc->last) pipe_send(Phase::Forward, *f);
    if (b && !bc->first) pipe_send(Phase::Backward, *b);
    // 6. the deferred pre_dispatch W of the last backward layer (the chunk's first layer).
    if (b && n_b > 0) weight(bc->layers[0], Slot::PreDispatch, *b);
    // 7. post_process forward (loss), pre_process backward.
    if (f && fc->last) process(Slot::PostProcess, Phase::Forward, *f);
    if (b && bc->first) process(Slot::PreProcess, Phase::Backward, *b);
  }

  // The distributed optimizer's parameter all-gathers of the previous step's update, issued on
  // the dp stream before anything else so that every forward can wait for its bucket.
  void gather_parameters_first(const std::vector<Bucket>& buckets) {
    if (ctx_.cfg.optimizer.fsdp) {
      fsdp_units(buckets);
      return;
    }
    if (!ctx_.megatron_sync() || !ctx_.cfg.optimizer.overlap_param_gather) return;
    // Forward order: the last bucket of a chunk holds its first layers.
    for (int v = 0; v < ctx_.cfg.model_chunks(); ++v)
      for (auto it = buckets.rbegin(); it != buckets.rend(); ++it)
        if (it->vp_stage == v) {
          const int id = param_gather(*it, static_cast<int>(buckets.rend() - it) - 1, {});
          if (id >= 0)
            for (int layer : it->layers) gather_of_.emplace(std::make_pair(v, layer), id);
        }
  }

  // Gradient synchronisation at the end of the step (see the file comment).
  void finish(const std::vector<Bucket>& buckets, double tp_replicated_elements) {
    std::vector<int> chain_ends;
    for (const auto& [key, local] : chain_last_) chain_ends.push_back(local);
    std::sort(chain_ends.begin(), chain_ends.end());
    if (!ctx_.megatron_sync()) {
      end_of_step_all_reduce(chain_ends, buckets, tp_replicated_elements);
      return;
    }
    const OptimizerConfig& o = ctx_.cfg.optimizer;
    std::vector<int> reduces;
    if (o.fsdp) {  // every unit reduced as its backward ended; the last ones now
      for (auto& [mb, pending] : fsdp_pending_) fsdp_reduce(pending);
      fsdp_pending_.clear();
      reduces = fsdp_reduces_;
    }
    for (std::size_t i = 0; i < buckets.size() && !o.fsdp; ++i) {
      const Bucket& bk = buckets[i];
      std::vector<int> deps;
      if (o.overlap_grad_reduce) {
        for (int layer : bk.layers) {
          const auto it = grads_done_.find({bk.vp_stage, layer});
          if (it != grads_done_.end()) deps.push_back(it->second);
        }
      } else {
        deps = chain_ends;  // finalize_model_grads: after the whole backward
      }
      const int members = static_cast<int>(group(bk.expert ? Group::Edp : Group::Dp).size());
      if (members < 2) continue;  // a single replica has nothing to reduce
      const double bytes = bk.elements * o.grad_bytes();  // the main gradients (fp32 unless bf16)
      const CollectiveKind kind = o.distributed ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce;
      Node n = dp_node(Slot::GradAllReduce, bk, static_cast<int>(i), bytes);
      for (int peer : group(bk.expert ? Group::Edp : Group::Dp))
        if (peer != rank_) n.sends.push_back({peer, (kind == CollectiveKind::AllReduce ? 2 : 1) * bytes / members});
      n.deps = std::move(deps);
      reduces.push_back(push(std::move(n)));
      collectives_.emplace_back(reduces.back(), kind, bk.expert ? Group::Edp : Group::Dp);
    }
    if (ctx_.cfg.tp > 1 && tp_replicated_elements > 0) {
      // finalize_model_grads step 3: the SP-replicated weights' gradients, summed over TP.
      Bucket replicated;
      Node n = dp_node(Slot::GradAllReduce, replicated, -1, tp_replicated_elements * o.grad_bytes());
      n.symbols = "tp_replicated";
      for (int peer : group(Group::Tp))
        if (peer != rank_) n.sends.push_back({peer, 2 * tp_replicated_elements * o.grad_bytes() / ctx_.cfg.tp});
      n.deps = chain_ends;
      reduces.push_back(push(std::move(n)));
      collectives_.emplace_back(reduces.back(), CollectiveKind::AllReduce, Group::Tp);
    }
    // The optimizer step over this rank's parameters (its shard of them with the distributed
    // optimizer): Adam reads the main gradient (fp32: 4 bytes, 2 in bf16), the fp32 master weight
    // and two moments, writes the last three and the bf16 weight, after the gradient norm read the
    // gradients once more: 34 bytes an element with fp32 gradients.
    double elements = 0;
    for (const Bucket& bk : buckets) {
      const double shard = o.distributed || o.fsdp ? group(bk.expert ? Group::Edp : Group::Dp).size() : 1;
      elements += bk.elements / shard;
    }
    Node step;
    step.stream = Stream::Compute;
    step.slot = Slot::OptimizerStep;
    step.phase = Phase::Forward;
    step.flops = 12 * elements;
    step.mem_bytes = (26 + 2 * o.grad_bytes()) * elements;
    step.work = ctx_.works->intern({{KernelKind::Elementwise, false, 0, 0, 0, 1, step.flops, step.mem_bytes}});
    step.deps = reduces.empty() ? chain_ends : reduces;
    const int step_id = push(std::move(step));
    if (o.distributed && !o.overlap_param_gather && !o.fsdp)
      for (std::size_t i = buckets.size(); i-- > 0;) param_gather(buckets[i], static_cast<int>(i), {step_id});
  }

  int rank() const { return rank_; }
  const RankCoords& coords() const { return coords_; }
  const std::vector<int>& group(Group g) const { return members_[static_cast<int>(g)]; }

  std::vector<Node> nodes;                    // ids and deps are local indices until assembled
  std::vector<std::pair<int, P2pKey>> sends;  // local index, the receive it feeds
  std::vector<std::pair<int, P2pKey>> recvs;  // local index, its own key
  // Local index of every rendezvous node, its kind and group (assembly numbers the instances).
  std::vector<std::tuple<int, CollectiveKind, Group>> collectives_;

 private:
  const Chunk& chunk(int vp) const {
    return ctx_.chunks[static_cast<std::size_t>(coords_.pp)][static_cast<std::size_t>(vp)];
  }
  // Layer-level run: the 13-step host order of reference section 3.6.
  void run_layer(const LayerInfo* f, const std::optional<ChunkRef>& fr, const LayerInfo* b,
                 const std::optional<ChunkRef>& br, bool last_layer_in_bwd) {
    const bool early = ctx_.opt.early_attn_release;
    // A checkpointed layer reruns first (under the block method, the chunk's first N layers only).
    if (b && ctx_.cfg.recompute.full_at(static_cast<int>(b - chunk(br->vp_stage).layers.data()), b->shape.mtp))
      recompute_layer(*b, *br);
    if (b && ctx_.cfg.recompute.has(kRecomputeMoe) && b->shape.moe()) recompute_moe(*b, *br);
    if (b) backward(*b, Slot::MtpPost, *br);        // 1
    if (b) backward(*b, Slot::Combine, *br);        // 2
    if (f) forward(*f, Slot::PreDispatch, *fr);     // 3
    if (b) backward(*b, Slot::Mlp, *br);            // 4
    if (f) forward(*f, Slot::Dispatch, *fr);        // 5
    if (b) weight(*b, Slot::Mlp, *br);              // 6
    if (b) backward(*b, Slot::Dispatch, *br);       // 7
    if (b && early) backward(*b, Slot::PreDispatch, *br);   // 8
    if (f) forward(*f, Slot::Mlp, *fr);             // 9
    if (f) forward(*f, Slot::Combine, *fr);         // 10
    if (b && !early) backward(*b, Slot::PreDispatch, *br);  // 11
    if (f) forward(*f, Slot::MtpPost, *fr);         // 12
    if (b && !last_layer_in_bwd) weight(*b, Slot::PreDispatch, *br);  // 13
  }

  void forward(const LayerInfo& l, Slot s, ChunkRef c) { layer_node(l, s, Phase::Forward, c); }
  void backward(const LayerInfo& l, Slot s, ChunkRef c) {
    if (ctx_.cfg.recompute.modules != 0) recompute_selective(l, s, c);
    layer_node(l, s, Phase::Backward, c);
  }
  void weight(const LayerInfo& l, Slot s, ChunkRef c) {
    if (!ctx_.opt.delay_wgrad) return;
    if (!l.shape.has_weight_grad(s, ctx_.dims.shared_expert_ffn > 0)) return;
    layer_node(l, s, Phase::Weight, c);
  }

  // Full recomputation: the layer's whole forward (with its collectives) before its backward.
  void recompute_layer(const LayerInfo& l, ChunkRef c) {
    for (Slot s : {Slot::PreDispatch, Slot::Dispatch, Slot::Mlp, Slot::Combine, Slot::MtpPost})
      layer_node(l, s, Phase::Recompute, c);
  }

  // Selective `moe`: the MoE part of pre_dispatch (norm, router, shared expert) and the
  // dispatch, experts and combine replay before the combine's backward.
  void recompute_moe(const LayerInfo& l, ChunkRef c) {
    std::vector<Block> moe_part;
    for (Block& blk : slot_blocks(l, Slot::PreDispatch))
      if (blk.symbol == 'r' || blk.symbol == 's') moe_part.push_back(std::move(blk));
    emit_blocks(l, Slot::PreDispatch, Phase::Recompute, c, moe_part);
    for (Slot s : {Slot::Dispatch, Slot::Mlp, Slot::Combine}) layer_node(l, s, Phase::Recompute, c);
  }

  // Selective modules of one slot, replayed right before the slot's backward.
  void recompute_selective(const LayerInfo& l, Slot s, ChunkRef c) {
    if (s != Slot::PreDispatch && s != Slot::Mlp) return;
    std::vector<Block> replay;
    for (const Block& blk : slot_blocks(l, s))
      for (const RecomputeName& m : recompute_names()) {
        if (!ctx_.cfg.recompute.has(m.module) || m.module == kRecomputeMoe) continue;
        Block r = detail::recompute_block(blk, m.module, ctx_.dims, ctx_.shard);
        if (!r.work.kernels.empty()) replay.push_back(std::move(r));
      }
    emit_blocks(l, s, Phase::Recompute, c, replay);
  }

  std::vector<Block> slot_blocks(const LayerInfo& l, Slot s) const {
    return detail::slot_blocks(l.shape, s, ctx_.dims, ctx_.cfg.ep, coords_.ep, ctx_.route, ctx_.shard);
  }

  void layer_node(const LayerInfo& l, Slot s, Phase phase, ChunkRef c) {
    if (!l.shape.has_slot(s)) return;  // no-op slots get no node; the order of the rest holds
    if (s == Slot::Dispatch || s == Slot::Combine) {
      a2a_node(l, s, phase, c);
      return;
    }
    const std::size_t first = nodes.size();
    if (ctx_.blocks() && phase != Phase::Weight) {
      emit_blocks(l, s, phase, c, slot_blocks(l, s));
    } else {
      const SlotWork work = slot_work(l.shape, s, ctx_.dims, ctx_.cfg.ep, coords_.ep, ctx_.route, ctx_.shard);
      compute_node(l, s, phase, c, work, "");
    }
    if (phase == Phase::Forward || phase == Phase::Backward) offload_copies(l, s, first);
  }

  // Activation offloading: the slot's offloaded activations (memory.hpp offloaded_elements) cross
  // the host link beside its kernels, D2H in the forward and H2D in the backward; each compute
  // node of the slot from `first` on carries a HostCopy kernel with its FLOP share of the bytes.
  void offload_copies(const LayerInfo& l, Slot s, std::size_t first) {
    if (!ctx_.cfg.offload.any() || (s != Slot::PreDispatch && s != Slot::Mlp)) return;
    double elements = 0;
    if (s == Slot::Mlp) {
      elements = offloaded_elements(l.shape.terminal, ctx_.dims, ctx_.cfg).mlp;
    } else {
      for (char sym : l.shape.symbols) elements += offloaded_elements(sym, ctx_.dims, ctx_.cfg).pre;
    }
    const double bytes = elements * ctx_.dims.bytes_per_element * owned_tokens(ctx_.dims, ctx_.shard);
    if (bytes <= 0) return;
    double flops = 0;
    std::vector<std::size_t> carriers;
    for (std::size_t id = first; id < nodes.size(); ++id)
      if (nodes[id].stream == Stream::Compute && nodes[id].part == Part::Main && nodes[id].work >= 0) {
        carriers.push_back(id);
        flops += nodes[id].flops;
      }
    for (std::size_t id : carriers) {
      Node& n = nodes[id];
      const double share = flops > 0 ? n.flops / flops : 1.0 / static_cast<double>(carriers.size());
      n.work = ctx_.works->with(n.work, {KernelKind::HostCopy, false, 0, 0, 0, 1, 0, share * bytes});
    }
  }

  // A dispatch or combine all-to-all over the EP group, with the expert-TP gather (after the
  // dispatch) or scatter (before the combine) of the routed rows when etp > 1.
  void a2a_node(const LayerInfo& l, Slot s, Phase phase, ChunkRef c) {
    const auto& d = ctx_.dims;
    const int ep = ctx_.cfg.ep;
    const auto& peers = group(Group::Ep);
    if (s == Slot::Combine && ctx_.cfg.etp > 1) etp_node(l, s, phase, c, Part::EtpScatter);
    Node n = layer_part(l, s, phase, Part::Main, Stream::Comm);
    n.symbols = std::string(1, l.shape.terminal);
    n.sends = a2a_sends(d, peers, coords_.ep, ctx_.route, s, phase, ctx_.shard);
    // What leaves, and what arrives: alltoall's mirror shares; the other dispatchers are symmetric.
    const bool mirror = ctx_.route.dispatcher == Dispatcher::AllToAll || ctx_.route.skew != 0;
    for (const Transfer& t : n.sends) n.mem_bytes += mirror ? t.bytes : 2 * t.bytes;
    if (mirror)
      for (int peer = 0; peer < ep; ++peer)
        if (peer != coords_.ep) n.mem_bytes += a2a_bytes(d, ep, ctx_.route, s, phase, peer, coords_.ep, ctx_.shard);
    collectives_.emplace_back(emit(std::move(n), c), CollectiveKind::AllToAll, Group::Ep);
    if (s == Slot::Dispatch && ctx_.cfg.etp > 1) etp_node(l, s, phase, c, Part::EtpGather);
  }

  void etp_node(const LayerInfo& l, Slot s, Phase phase, ChunkRef c, Part part) {
    const auto& d = ctx_.dims;
    // Rows this rank received from the all-to-all, before the gather over its etp peers.
    const double rows = routed_copies(d, ctx_.cfg.ep, coords_.ep, ctx_.route, ctx_.shard) / ctx_.cfg.etp;
    const CollectiveKind kind = part == Part::EtpGather ? CollectiveKind::AllGather : CollectiveKind::ReduceScatter;
    block_collective(l, s, phase, c, l.shape.terminal, part, kind, Group::Etp, rows * d.hidden * d.bytes_per_element,
                     Stream::Comm);
  }

  // A node of layer l's slot s in `phase`, not yet emitted.
  static Node layer_part(const LayerInfo& l, Slot s, Phase phase, Part part, Stream stream) {
    Node n;
    n.slot = s;
    n.phase = phase;
    n.part = part;
    n.layer = l.index;
    n.mtp = l.shape.mtp;
    n.stream = stream;
    return n;
  }

  int compute_node(const LayerInfo& l, Slot s, Phase phase, ChunkRef c, const SlotWork& work,
                   const std::string& symbols) {
    Node n = layer_part(l, s, phase, Part::Main, Stream::Compute);
    n.symbols = !symbols.empty() ? symbols : s == Slot::Mlp ? std::string(1, l.shape.terminal) : l.shape.symbols;
    const NodeCost cost = phase_cost(work, phase, ctx_.opt.delay_wgrad);
    n.flops = cost.flops;
    n.mem_bytes = cost.mem_bytes;
    n.work = ctx_.works->intern(work.kernels);
    return emit(std::move(n), c);
  }

  // A TP/SP, CP or ETP collective of a block: `per_peer` bytes to every member of `g` but this
  // rank (all-gather, reduce-scatter, all-to-all), on the compute stream unless said otherwise.
  int block_collective(const LayerInfo& l, Slot s, Phase phase, ChunkRef c, char symbol, Part part,
                       CollectiveKind kind, Group g, double per_peer, Stream stream = Stream::Compute) {
    Node n = layer_part(l, s, phase, part, stream);
    n.symbols = std::string(1, symbol);
    for (int peer : group(g))
      if (peer != rank_) {
        n.sends.push_back({peer, per_peer});
        n.mem_bytes += 2 * per_peer;
      }
    const int id = emit(std::move(n), c);
    collectives_.emplace_back(id, kind, g);
    return id;
  }

  // The nodes of a slot's blocks for one phase (see the file comment). Adjacent blocks without
  // collectives share one compute node.
  void emit_blocks(const LayerInfo& l, Slot s, Phase phase, ChunkRef c, std::vector<Block> blocks) {
    const bool backward = phase == Phase::Backward;
    if (backward) std::reverse(blocks.begin(), blocks.end());
    const int tp = ctx_.cfg.tp, cp = ctx_.cfg.cp;
    const double per_token = ctx_.dims.bytes_per_element * owned_tokens(ctx_.dims, ctx_.shard);
    SlotWork pending;
    std::string pending_symbols;
    auto flush = [&] {
      if (pending.kernels.empty() && pending.weight_gemm_flops == 0 && pending.other_flops == 0) return;
      compute_node(l, s, phase, c, pending, pending_symbols);
      pending = {};
      pending_symbols.clear();
    };
    for (const Block& b : blocks) {
      const bool tp_comm = b.tp_split && tp > 1 && (b.gather_width > 0 || b.scatter_width > 0);
      if (!tp_comm && b.ring_elements == 0 && b.cp_a2a_elements == 0) {
        pending += b.work;
        pending_symbols += b.symbol;
        continue;
      }
      flush();
      // Forward: gather the input, run, scatter the output. Backward: gather the output
      // gradient, run (re-gathering the input for the weight gradients alongside), scatter the
      // input gradient.
      const double first = backward ? b.scatter_width : b.gather_width;
      const double last = backward ? b.gather_width : b.scatter_width;
      // TP communication overlap (Transformer Engine's userbuffers, physics.md 5): the gather runs
      // as a ring exchange beside the first GEMM, the reduce-scatter pipelined in 4 chunks beside
      // the last one (the last chunk's exposed after it), the backward's re-gather of the input
      // in bulk beside the weight gradients. The block's node carries them; the replay runs its
      // kernels and transfers side by side.
      const bool overlap_tp = tp_comm && ctx_.opt.tp_comm_overlap;
      constexpr double kPipelinedChunks = 4;
      if (tp_comm && first > 0 && !overlap_tp)
        block_collective(l, s, phase, c, b.symbol, Part::TpGather, CollectiveKind::AllGather, Group::Tp,
                         first * per_token);
      if (b.cp_a2a_elements > 0)  // each all-to-all keeps 1/cp of its tensor and sends the rest
        block_collective(l, s, phase, c, b.symbol, Part::CpExchange, CollectiveKind::AllToAll, Group::Cp,
                         b.cp_a2a_elements * ctx_.dims.bytes_per_element / cp);
      const int id = compute_node(l, s, phase, c, b.work, std::string(1, b.symbol));
      Node& node = nodes[static_cast<std::size_t>(id)];
      if (b.ring_elements > 0) {
        // Ring attention: (cp-1) key/value blocks to the successor in the forward, twice as many
        // (keys/values and their gradients) in the backward, overlapped with the core.
        const auto& ring = group(Group::Cp);
        const std::size_t me = static_cast<std::size_t>(std::find(ring.begin(), ring.end(), rank_) - ring.begin());
        const double bytes = (backward ? 2.0 : 1.0) * (cp - 1) * b.ring_elements * ctx_.dims.bytes_per_element;
        node.sends.push_back({ring[(me + 1) % ring.size()], bytes});
        node.mem_bytes += 2 * bytes;
        collectives_.emplace_back(id, CollectiveKind::AllGather, Group::Cp);
      } else if (overlap_tp) {
        // Under FP8 the userbuffers all-gathers move FP8 (one byte where bf16 has two); the
        // reduce-scatters stay bf16 (physics.md 6).
        const double gather = ctx_.opt.precision == Precision::Bf16 ? 1.0 : 0.5;
        const double carried = gather * (first + (backward ? b.gather_width : 0.0)) + last * (1 - 1 / kPipelinedChunks);
        if (carried > 0) {
          for (int peer : group(Group::Tp))
            if (peer != rank_) node.sends.push_back({peer, carried * per_token});
          node.mem_bytes += 2 * carried * per_token * (tp - 1);
          collectives_.emplace_back(id, CollectiveKind::AllGather, Group::Tp);
        }
      } else if (tp_comm && backward && b.gather_width > 0) {
        for (int peer : group(Group::Tp))
          if (peer != rank_) node.sends.push_back({peer, b.gather_width * per_token});
        collectives_.emplace_back(id, CollectiveKind::AllGather, Group::Tp);
      }
      if (tp_comm && last > 0)
        block_collective(l, s, phase, c, b.symbol, Part::TpScatter, CollectiveKind::ReduceScatter, Group::Tp,
                         (overlap_tp ? 1 / kPipelinedChunks : 1.0) * last * per_token);
    }
    flush();
  }

  void process(Slot s, Phase phase, ChunkRef c) {
    SlotWork work;
    if (s == Slot::PreProcess) {
      work = embedding_work(ctx_.dims, ctx_.shard);
    } else {
      // The output layer and loss run once per prediction depth (main + every MTP depth).
      const SlotWork one = output_work(ctx_.dims, ctx_.shard, ctx_.opt.cross_entropy_fusion);
      for (int k = 0; k <= ctx_.mtp_depths; ++k) work += one;
    }
    const NodeCost cost = phase_cost(work, phase, false);  // embedding/output wgrad never delayed
    // Under TP the embedding's partial sums are reduce-scattered into the SP shard (forward) and
    // the gradient gathered back; the output layer gathers its input and scatters its gradient.
    const bool tp = ctx_.cfg.tp > 1;
    const double heads = s == Slot::PostProcess ? 1.0 + ctx_.mtp_depths : 1.0;
    const double per_peer = heads * ctx_.dims.hidden * ctx_.dims.bytes_per_element * owned_tokens(ctx_.dims, ctx_.shard);
    const bool gather_first = (s == Slot::PostProcess) == (phase == Phase::Forward);
    const LayerInfo none{-1, {}};
    if (tp && gather_first)
      block_collective(none, s, phase, c, 'o', Part::TpGather, CollectiveKind::AllGather, Group::Tp, per_peer);
    Node n;
    n.slot = s;
    n.phase = phase;
    n.flops = cost.flops;
    n.mem_bytes = cost.mem_bytes;
    n.work = ctx_.works->intern(work.kernels);
    const int key = s == Slot::PreProcess ? kEmbeddingKey : kOutputKey;
    if (phase == Phase::Forward) {
      const auto it = gather_of_.find({c.vp_stage, key});
      if (it != gather_of_.end() && first_use_.insert({c.vp_stage, key}).second) n.deps.push_back(it->second);
    }
    const int id = emit(std::move(n), c);
    if (phase == Phase::Backward && c.microbatch == ctx_.cfg.microbatches - 1) grads_done_[{c.vp_stage, key}] = id;
    if (tp && !gather_first)
      block_collective(none, s, phase, c, 'o', Part::TpScatter, CollectiveKind::ReduceScatter, Group::Tp, per_peer);
  }

  // The neighbouring stage of chunk c in model order: forward goes to the next stage (the next
  // pp rank, wrapping to pp rank 0 of the next virtual stage), backward to the previous one.
  P2pKey neighbour(Phase direction_of_data, ChunkRef c, bool toward_next) const {
    const int pp = ctx_.cfg.pp, stage = ctx_.cfg.stage_ranks();
    int peer_pp = coords_.pp, peer_vp = c.vp_stage;
    if (toward_next) {
      if (++peer_pp == pp) peer_pp = 0, ++peer_vp;
    } else {
      if (--peer_pp < 0) peer_pp = pp - 1, --peer_vp;
    }
    return {peer_pp * stage + rank_ % stage, direction_of_data, c.microbatch, peer_vp};
  }

  void pipe_send(Phase phase, ChunkRef c) {
    const P2pKey to = neighbour(phase, c, phase == Phase::Forward);
    Node n;
    n.stream = Stream::Comm;
    n.slot = Slot::PipeSend;
    n.phase = phase;
    n.mem_bytes = pipe_bytes(ctx_.dims, ctx_.shard);
    n.sends.push_back({to.rank, n.mem_bytes});
    sends.emplace_back(emit(std::move(n), c), to);
  }

  void pipe_recv(Phase phase, ChunkRef c) {
    Node n;
    n.stream = Stream::Comm;
    n.slot = Slot::PipeRecv;
    n.phase = phase;
    n.mem_bytes = pipe_bytes(ctx_.dims, ctx_.shard);
    recvs.emplace_back(emit(std::move(n), c), P2pKey{rank_, phase, c.microbatch, c.vp_stage});
  }

  // The end-of-step all-reduce (GradSync::EndOfStep): this rank's non-expert gradients (its TP
  // shard of them and the replicated ones, as the buckets count them) over the dense
  // data-parallel group, its expert gradients over the expert data-parallel replicas, and under
  // TP the replicated parameters' gradients summed over TP (megatron-parallel.md 2.4).
  void end_of_step_all_reduce(const std::vector<int>& chain_ends, const std::vector<Bucket>& buckets,
                              double tp_replicated_elements) {
    double non_expert = 0, expert = 0;
    for (const Bucket& bk : buckets) (bk.expert ? expert : non_expert) += bk.elements;
    const auto& d = ctx_.dims;
    auto all_reduce = [&](double bytes, Group g, const char* what) {
      const auto& peers = group(g);
      Node n;
      n.stream = Stream::Comm;
      n.slot = Slot::GradAllReduce;
      n.phase = Phase::Backward;
      n.symbols = what;
      n.mem_bytes = bytes;
      for (int peer : peers)
        if (peer != rank_) n.sends.push_back({peer, 2 * bytes / static_cast<double>(peers.size())});
      n.deps = chain_ends;
      collectives_.emplace_back(push(std::move(n)), CollectiveKind::AllReduce, g);
    };
    if (group(Group::Dp).size() > 1 && non_expert > 0) all_reduce(non_expert * d.bytes_per_element, Group::Dp, "non_expert");
    if (group(Group::Edp).size() > 1 && expert > 0) all_reduce(expert * d.bytes_per_element, Group::Edp, "expert");
    if (ctx_.cfg.tp > 1 && tp_replicated_elements > 0)
      all_reduce(tp_replicated_elements * d.bytes_per_element, Group::Tp, "tp_replicated");
  }

  Node dp_node(Slot s, const Bucket& bk, int index, double bytes) const {
    Node n;
    n.stream = Stream::Dp;
    n.slot = s;
    n.phase = s == Slot::ParamGather ? Phase::Forward : Phase::Backward;
    n.symbols = bk.expert ? "expert" : "non_expert";
    n.vp_stage = bk.vp_stage;
    n.layer = index;  // the bucket
    n.mem_bytes = bytes;
    return n;
  }

  int param_gather(const Bucket& bk, int index, std::vector<int> deps) {
    const auto& g = group(bk.expert ? Group::Edp : Group::Dp);
    if (g.size() < 2) return -1;  // nothing to gather from a single replica
    const double bytes = bk.elements * 2.0;  // bf16 parameters
    Node n = dp_node(Slot::ParamGather, bk, index, bytes);
    for (int peer : g)
      if (peer != rank_) n.sends.push_back({peer, bytes / static_cast<double>(g.size())});
    n.deps = std::move(deps);
    const int id = push(std::move(n));
    collectives_.emplace_back(id, CollectiveKind::AllGather, bk.expert ? Group::Edp : Group::Dp);
    return id;
  }

  // Appends a node of chunk c and chains it after the previous node of the same chunk plan
  // (one event per microbatch chunk, reference section 3.5).
  int emit(Node n, ChunkRef c) {
    n.microbatch = c.microbatch;
    n.vp_stage = c.vp_stage;
    const int unit = fsdp_unit_key(n);
    const bool fsdp = !fsdp_order_.empty() && unit != kNoUnit;
    if (fsdp) fsdp_before(n, c, unit);
    const auto key = std::make_pair(c.microbatch, c.vp_stage);
    const auto it = chain_last_.find(key);
    if (it != chain_last_.end()) n.deps.push_back(it->second);
    const int layer = n.layer < 0 ? kEmbeddingKey : n.mtp ? -2 - n.layer : n.layer;
    if (n.layer >= 0 && n.phase == Phase::Forward && !gather_of_.empty()) {
      const auto g = gather_of_.find({c.vp_stage, layer});
      if (g != gather_of_.end() && first_use_.insert({c.vp_stage, layer}).second) n.deps.push_back(g->second);
    }
    const bool grads = n.phase == Phase::Backward || n.phase == Phase::Weight;
    const int n_layer = n.layer;
    const bool backward = n.phase == Phase::Backward;
    const int local = push(std::move(n));
    chain_last_[key] = local;
    if (fsdp && backward) fsdp_pending_[c.microbatch] = {c.vp_stage, unit, local};
    if (grads && n_layer >= 0 && c.microbatch == ctx_.cfg.microbatches - 1) grads_done_[{c.vp_stage, layer}] = local;
    return local;
  }

  // ---- Megatron-FSDP (OptimizerConfig::fsdp) --------------------------------------------
  static constexpr int kNoUnit = -999999999;
  struct PendingReduce {
    int vp_stage = 0, unit = kNoUnit, last = -1;  // the unit whose backward ran, its last node
  };

  // The unit a node belongs to: its layer (MTP depth d as -2 - d), the embedding or the output.
  static int fsdp_unit_key(const Node& n) {
    if (n.microbatch < 0) return kNoUnit;
    if (n.slot == Slot::PreProcess) return kEmbeddingKey;
    if (n.slot == Slot::PostProcess) return kOutputKey;
    if (n.layer < 0) return kNoUnit;
    return n.mtp ? -2 - n.layer : n.layer;
  }

  // Units of each chunk in forward order and their buckets (one per parameter buffer).
  void fsdp_units(const std::vector<Bucket>& buckets) {
    for (int v = 0; v < ctx_.cfg.model_chunks(); ++v) {
      const Chunk& c = chunk(v);
      std::vector<int> order;
      if (c.first) order.push_back(kEmbeddingKey);
      for (const LayerInfo& l : c.layers) order.push_back(l.shape.mtp ? -2 - l.index : l.index);
      if (c.last) order.push_back(kOutputKey);
      fsdp_order_[v] = order;
    }
    for (std::size_t i = 0; i < buckets.size(); ++i)
      for (int key : buckets[i].layers) fsdp_buckets_[{buckets[i].vp_stage, key}].push_back(static_cast<int>(i));
    fsdp_all_ = buckets;
  }

  // Before a unit's first node of a microbatch's forward (pass 0) or recompute/backward (pass 1):
  // its parameters all-gathered (unless prefetched), the next unit's gather issued behind it, and
  // in the backward the previous unit's gradients reduce-scattered.
  void fsdp_before(Node& n, ChunkRef c, int unit) {
    const int pass = n.phase == Phase::Forward ? 0 : 1;
    if (pass == 1) {
      auto it = fsdp_pending_.find(c.microbatch);
      if (it != fsdp_pending_.end() && (it->second.unit != unit || it->second.vp_stage != c.vp_stage)) {
        fsdp_reduce(it->second);
        fsdp_pending_.erase(it);
      }
    }
    const auto key = std::make_tuple(c.microbatch, c.vp_stage, unit, pass);
    if (!fsdp_first_.insert(key).second) return;
    if (!fsdp_gathers_.count(key)) fsdp_gathers_[key] = fsdp_gather(c.vp_stage, unit);
    for (int id : fsdp_gathers_[key]) n.deps.push_back(id);
    const std::vector<int>& order = fsdp_order_[c.vp_stage];
    const auto at = std::find(order.begin(), order.end(), unit);
    if (at == order.end()) return;
    const auto next = pass == 0 ? at + 1 : at;
    if (pass == 0 && next == order.end()) return;
    if (pass == 1 && next == order.begin()) return;
    const int next_unit = pass == 0 ? *next : *(next - 1);
    const auto next_key = std::make_tuple(c.microbatch, c.vp_stage, next_unit, pass);
    if (!fsdp_gathers_.count(next_key)) fsdp_gathers_[next_key] = fsdp_gather(c.vp_stage, next_unit);
  }

  std::vector<int> fsdp_gather(int vp, int unit) {
    std::vector<int> ids;
    const auto it = fsdp_buckets_.find({vp, unit});
    if (it == fsdp_buckets_.end()) return ids;
    for (int b : it->second) {
      const int id = param_gather(fsdp_all_[static_cast<std::size_t>(b)], b, {});
      if (id >= 0) ids.push_back(id);
    }
    return ids;
  }

  // The unit's main gradients (fp32, or bf16) reduce-scattered over its data-parallel group(s).
  void fsdp_reduce(const PendingReduce& p) {
    const auto it = fsdp_buckets_.find({p.vp_stage, p.unit});
    if (it == fsdp_buckets_.end()) return;
    for (int b : it->second) {
      const Bucket& bk = fsdp_all_[static_cast<std::size_t>(b)];
      const auto& g = group(bk.expert ? Group::Edp : Group::Dp);
      if (g.size() < 2) continue;
      const double bytes = bk.elements * ctx_.cfg.optimizer.grad_bytes();
      Node n = dp_node(Slot::GradAllReduce, bk, b, bytes);
      for (int peer : g)
        if (peer != rank_) n.sends.push_back({peer, bytes / static_cast<double>(g.size())});
      n.deps.push_back(p.last);
      const int id = push(std::move(n));
      collectives_.emplace_back(id, CollectiveKind::ReduceScatter, bk.expert ? Group::Edp : Group::Dp);
      fsdp_reduces_.push_back(id);
    }
  }

  int push(Node n) {
    n.rank = rank_;
    n.id = static_cast<int>(nodes.size());
    nodes.push_back(std::move(n));
    return nodes.back().id;
  }

  const Context& ctx_;
  int rank_;
  RankCoords coords_;
  std::vector<int> members_[7];
  std::map<std::pair<int, int>, int> chain_last_;
  std::map<std::pair<int, int>, int> grads_done_;  // (vp, layer) -> last node of the last microbatch
  std::map<std::pair<int, int>, int> gather_of_;   // (vp, layer) -> its bucket's parameter gather
  std::set<std::pair<int, int>> first_use_;        // (vp, layer) whose first forward waited already
  // Megatron-FSDP: units per chunk in forward order, each unit's buckets, the gathers issued per
  // (microbatch, vp, unit, pass), the units whose first node waited, the reduce each microbatch's
  // backward still owes, and every reduce issued.
  std::map<int, std::vector<int>> fsdp_order_;
  std::map<std::pair<int, int>, std::vector<int>> fsdp_buckets_;
  std::vector<Bucket> fsdp_all_;
  std::map<std::tuple<int, int, int, int>, std::vector<int>> fsdp_gathers_;
  std::set<std::tuple<int, int, int, int>> fsdp_first_;
  std::map<int, PendingReduce> fsdp_pending_;
  std::vector<int> fsdp_reduces_;
};

[[noreturn]] void reject(ErrorCode code, const std::string& message) {
  throw ScheduleError(code, message);
}

std::string layer_name(const patterns::Item& item, int logical) {
  return "logical layer " + std::to_string(logical) + " (pattern position " +
         std::to_string(item.position) + ")";
}

// Megatron's DDP buckets of one rank (megatron-parallel.md 4.1): parameters in reverse order of
// registration, a bucket closing once it holds `bucket_elements`; only the first chunk of
// pipeline rank 0 is cut into buckets (and only with overlap_grad_reduce), every other chunk has
// one bucket per buffer. Dense and expert parameters fill separate buffers.
std::vector<Bucket> rank_buckets(const Context& ctx, int pp_rank, double* tp_replicated) {
  const auto& d = ctx.dims;
  const auto& cfg = ctx.cfg;
  std::vector<Bucket> out;
  const double size = cfg.optimizer.bucket_elements > 0
                          ? cfg.optimizer.bucket_elements
                          : std::max(40e6, 1e6 * cfg.dp * cfg.cp);
  const double vocab_params = double(d.vocab) * d.hidden / cfg.tp;
  *tp_replicated = 0;
  const auto& chunks = ctx.chunks[static_cast<std::size_t>(pp_rank)];
  for (int v = 0; v < static_cast<int>(chunks.size()); ++v) {
    const Chunk& c = chunks[static_cast<std::size_t>(v)];
    // Megatron-FSDP: every unit (layer, embedding, output) is a bucket of its own.
    const bool cut = cfg.optimizer.fsdp || (cfg.optimizer.overlap_grad_reduce && pp_rank == 0 && v == 0);
    // (layer id, dense, expert) in reverse registration order.
    std::vector<std::tuple<int, double, double>> params;
    if (c.last) {
      const bool own_copy = !d.tied_embeddings || cfg.pp > 1;  // a tied output shares stage 0's weight
      params.emplace_back(kOutputKey, (own_copy ? vocab_params : 0.0) + d.hidden, 0.0);
      *tp_replicated += d.hidden;
    }
    for (auto it = c.layers.rbegin(); it != c.layers.rend(); ++it) {
      const RankLayerParams p = rank_layer_params(it->shape.symbols, it->shape.mtp, d, cfg);
      params.emplace_back(it->shape.mtp ? -2 - it->index : it->index, p.dense, p.expert);
      *tp_replicated += p.replicated;
    }
    if (c.first) params.emplace_back(kEmbeddingKey, vocab_params, 0.0);
    for (bool expert : {false, true}) {
      Bucket current{expert, v, 0, {}};
      for (const auto& [layer, dense, experts] : params) {
        const double n = expert ? experts : dense;
        if (n <= 0) continue;
        current.elements += n;
        if (std::find(current.layers.begin(), current.layers.end(), layer) == current.layers.end())
          current.layers.push_back(layer);
        if (cut && (cfg.optimizer.fsdp || current.elements >= size)) {
          out.push_back(std::move(current));
          current = {expert, v, 0, {}};
        }
      }
      if (current.elements > 0) out.push_back(std::move(current));
    }
  }
  return out;
}

void check_recompute(const patterns::ParsedPattern& pattern, const ParallelConfig& config,
                     const ScheduleOptions& options) {
  const Recompute& r = config.recompute;
  if (r.full && r.modules != 0)
    reject(ErrorCode::BadConfig, "recompute: 'full' cannot be combined with selective modules (" + to_string(r) + ")");
  if (options.overlap && r.full)
    reject(ErrorCode::O7_OverlapConfig,
           "full recomputation is not supported with the EP all-to-all overlap (Megatron's rule); use selective "
           "modules or turn overlap off (pattern '" + pattern.text + "')");
  if (options.overlap && r.has(kRecomputeMoe))
    reject(ErrorCode::O7_OverlapConfig,
           "recomputing the 'moe' module replays its all-to-alls and is not supported with the EP all-to-all "
           "overlap (Megatron's rule); use moe_act or turn overlap off");
  // Fine-grained activation offloading, by Megatron's TransformerConfig checks.
  const Offload& o = config.offload;
  if (r.has(kRecomputeMoe) && (o.has(kOffloadExpertFc1) || o.has(kOffloadMoeAct)))
    reject(ErrorCode::BadConfig,
           "offload: expert_fc1 and moe_act cannot be offloaded while the whole 'moe' module recomputes (its forward "
           "saves nothing to offload; Megatron's rule)");
  if (r.full && o.any())
    reject(ErrorCode::BadConfig,
           "offload: full recomputation keeps only each layer's input, so there is nothing to offload; use selective "
           "recompute modules or no offloading");
}

}  // namespace

namespace {

// Each gradient bucket's reduction (and parameter gather) names every other replica as a peer:
// dp x cp ranks sending to dp x cp - 1 peers each, which plan_size's estimate (all-to-alls
// only) does not count. Checked once the buckets are known, before any rank is built.
void check_gradient_transfers(const ParallelConfig& config, const ScheduleOptions& options,
                              const std::vector<std::vector<Bucket>>& buckets) {
  const double dense = static_cast<double>(group_members(config, 0, Group::Dp).size());
  const double expert = static_cast<double>(group_members(config, 0, Group::Edp).size());
  double transfers = 0;
  for (const BuiltRank& b : built_ranks(config, options)) {
    const auto stage = static_cast<std::size_t>(b.rank / config.stage_ranks());
    for (const Bucket& bk : buckets[stage]) transfers += 2 * ((bk.expert ? expert : dense) - 1);
  }
  if (transfers > kMaxPlanTransfers) {
    std::size_t most = 0;
    for (const auto& stage : buckets) most = std::max(most, stage.size());
    char text[64];
    std::snprintf(text, sizeof text, "about %.3g peer transfers, more than the limit of %.3g", transfers,
                  kMaxPlanTransfers);
    reject(ErrorCode::BadConfig, std::string("the plan's gradient reductions would hold ") + text +
                                     " (data-parallel group of " + std::to_string(static_cast<long long>(dense)) +
                                     " ranks, up to " + std::to_string(most) +
                                     " buckets per rank); reduce dp, or with --no-fold the ranks");
  }
}

}  // namespace

std::vector<BuiltRank> built_ranks(const ParallelConfig& config, const ScheduleOptions& options) {
  std::vector<BuiltRank> out;
  const int stage = config.stage_ranks();
  if (builds_folded(config, options)) {
    // Every rank of a stage does the same work with other peers; under skewed routing the
    // experts' load depends on the EP rank, so each EP rank is its own class.
    const bool skewed = options.routing_skew != 0 && config.ep > 1;
    for (int p = 0; p < config.pp; ++p)
      for (int e = 0; e < (skewed ? config.ep : 1); ++e)
        out.push_back({p * stage + config.etp * e, skewed ? stage / config.ep : stage});
    return out;
  }
  for (int r = 0; r < config.global_ranks(); ++r) out.push_back({r, 1});
  return out;
}

std::string_view schedule_name(const ParallelConfig& config, const ScheduleOptions& options) {
  if (!options.overlap) return "sequential";
  return config.pp == 1 ? "combined_1f1b" : "interleaved_1f1b";
}

void check_schedule_config(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                           const ParallelConfig& config, const ScheduleOptions& options) {
  validate(dims);
  validate(config);
  validate(options);
  // Before any O(size) work; a folded build holds only its representatives' nodes.
  const bool fold = builds_folded(config, options);
  const bool skewed = options.routing_skew != 0 && config.ep > 1;
  check_plan_size(pattern, config, fold ? double(config.pp) * (skewed ? config.ep : 1) : 0.0);
  const int segments = pattern.segment_count();
  if (segments > 1 && segments % config.pp == 0 && segments != config.pp * config.model_chunks())
    reject(ErrorCode::BadConfig, "the pattern has " + std::to_string(segments) + " pipe segments but pp = " +
                                     std::to_string(config.pp) + " x vpp = " + std::to_string(config.model_chunks()) +
                                     " stages take " + std::to_string(config.pp * config.model_chunks()) +
                                     "; pass --vpp " + std::to_string(segments / config.pp));
  const bool overlap = options.overlap;
  if (options.delay_wgrad && !overlap)
    reject(ErrorCode::O10_DelayWgradNeedsOverlap,
           "delayed weight gradients (delay_wgrad) need the overlap schedule, but overlap is off");
  if (options.delay_wgrad) {
    // Checked before O1 so that the reason is the weight gradients: a layer type without a wgrad
    // callable would have its weight gradients silently dropped, so the plan is refused.
    auto check = [&](const std::string& symbols, const std::string& where) {
      for (const char c : symbols) {
        const patterns::SymbolInfo* info = patterns::find_symbol(c);
        if (info && !info->defers_wgrad)
          reject(ErrorCode::DelayWgradLayer,
                 "delayed weight gradients (delay_wgrad) need every layer to move its weight-gradient GEMMs "
                 "to a W node, but layer type '" + std::string(1, c) + "' (" + std::string(info->name) +
                     ") in " + where + " has no weight-gradient step to delay (the overlap scheduler's wgrad map "
                     "covers M * D G + and the - / E terminal); turn delay_wgrad off (pattern '" + pattern.text + "')");
      }
    };
    int logical = 0;
    for (const auto& item : pattern.items()) check(item.symbols, layer_name(item, logical++));
    if (pattern.mtp_depths > 0) check(pattern.mtp, "the MTP depth pattern");
  }
  if (options.early_attn_release && !overlap)
    reject(ErrorCode::O7_OverlapConfig,
           "early attention memory release needs the overlap schedule, but overlap is off");
  if (overlap && options.cuda_graphs)
    reject(ErrorCode::O2_OverlapCudaGraphs,
           "the EP all-to-all overlap does not support CUDA graphs (for any pattern); "
           "turn off cuda graphs or overlap (pattern '" + pattern.text + "')");
  if (overlap && config.ep <= 1)
    reject(ErrorCode::O7_OverlapConfig,
           "the EP all-to-all overlap needs expert parallelism, but ep = " +
               std::to_string(config.ep) + "; set ep > 1 or turn overlap off");
  if (overlap && config.pp > 1 && config.vpp == 0)
    reject(ErrorCode::O7_OverlapConfig,
           "the EP all-to-all overlap with pp = " + std::to_string(config.pp) +
               " needs virtual pipelining; set vpp (>= 1) or turn overlap off");
  if (overlap && pattern.mtp_depths > 0) {
    if (options.reject_hybrid_mtp)
      reject(ErrorCode::O3_OverlapHybridMtp,
             "hybrid MTP ('/" + pattern.mtp + "' x " + std::to_string(pattern.mtp_depths) +
                 ") is not supported with the EP all-to-all overlap: the overlap scheduler does "
                 "not expand the MTP's nested stack (pattern '" + pattern.text + "')");
    if (pattern.mtp_depths > 1)
      reject(ErrorCode::O7_OverlapConfig,
             "the EP all-to-all overlap supports at most 1 MTP depth, but the pattern has " +
                 std::to_string(pattern.mtp_depths) + " (pattern '" + pattern.text + "')");
    const LayerShape mtp = split_layer(pattern.mtp, true);
    if (!mtp.moe())
      reject(ErrorCode::O8_MtpInnerNotMoe,
             "under the EP all-to-all overlap the MTP inner layer must end in MoE 'E', but it is '" +
                 pattern.mtp + "' (pattern '" + pattern.text + "')");
    check_overlap_splittable(pattern.mtp, "the MTP depth pattern");
  }
  if (overlap) {
    int logical = 0;
    for (const auto& item : pattern.items()) check_overlap_splittable(item.symbols, layer_name(item, logical++));
  }
  if (pattern.has_moe() && dims.num_experts % config.ep != 0)
    reject(ErrorCode::BadConfig, "num_experts = " + std::to_string(dims.num_experts) +
                                     " must be a multiple of ep = " + std::to_string(config.ep));
  check_recompute(pattern, config, options);
  if (config.optimizer.fsdp && options.delay_wgrad)
    reject(ErrorCode::BadConfig,
           "Megatron-FSDP does not take delayed weight gradients (Megatron-LM refuses delay_wgrad_compute with "
           "Megatron-FSDP); use --no-delay-wgrad (the EP overlap runs without them)");
  check_layout(pattern, dims, config);
}

Plan build_plan(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                const ParallelConfig& config, const ScheduleOptions& options) {
  check_schedule_config(pattern, dims, config, options);

  WorkTable works;
  works.precision = options.precision;
  Context ctx{dims, config, options, pattern.mtp_depths, {}, shard_of(config), &works, MoeRoute(options.routing_skew)};
  ctx.route.dispatcher = options.dispatcher;
  ctx.route.gpus_per_node = options.nvlink_domain;
  ctx.route.dispatch_fp8 = options.dispatch_fp8;
  if (options.routing_skew == 0) {
    const bool given = options.expert_load != 0 && config.ep > 1 && dims.num_experts > 0;
    ctx.route.load_factor =
        given ? options.expert_load : expert_load_factor(dims, config.ep, ctx.shard, options.routing);
    // The EP ranks one node holds (Megatron's layout puts an EP group's members ETP apart), whose
    // experts the node's NICs serve together: the fewest a node holds of any EP group that spans
    // nodes (the fewer pooled, the wider the node's spread). No group spanning nodes: no RDMA
    // copies, the rank's factor stands. A given load stands for the node's as well unless the
    // node's is given: what a node pools depends on where the hot experts sit.
    const int gpn = std::max(1, options.nvlink_domain);
    int fewest = 0;
    for (int first = 0; first < config.global_ranks(); ++first) {
      const std::vector<int> group = group_members(config, first, Group::Ep);
      if (group.front() != first || group.front() / gpn == group.back() / gpn) continue;
      std::map<int, int> per_node;
      for (int r : group) ++per_node[r / gpn];
      for (const auto& [node, members] : per_node) fewest = fewest == 0 ? members : std::min(fewest, members);
    }
    const bool node_given = options.expert_node_load != 0 && config.ep > 1 && dims.num_experts > 0;
    ctx.route.node_load_factor =
        node_given   ? options.expert_node_load
        : given      ? options.expert_load
        : fewest > 0 ? expert_load_factor(dims, config.ep, ctx.shard, options.routing, std::min(fewest, config.ep / 2))
                     : ctx.route.load_factor;
  }
  const int chunks_per_rank = config.model_chunks();
  ctx.chunks.assign(static_cast<std::size_t>(config.pp),
                    std::vector<Chunk>(static_cast<std::size_t>(chunks_per_rank)));
  PipelineSplit split_used;
  int allocated_layers = 0;
  for (const patterns::StageSlice& stage : split_stages(pattern, config, &split_used)) {
    if (stage.pp_rank < 0 || stage.pp_rank >= config.pp || stage.vp_stage < 0 ||
        stage.vp_stage >= chunks_per_rank)
      throw std::logic_error("allocate_stages returned stage (pp_rank " +
                             std::to_string(stage.pp_rank) + ", vp_stage " +
                             std::to_string(stage.vp_stage) + ") outside pp x vpp");
    Chunk& c = ctx.chunks[static_cast<std::size_t>(stage.pp_rank)]
                         [static_cast<std::size_t>(stage.vp_stage)];
    for (std::size_t i = 0; i < stage.items.size(); ++i)
      c.layers.push_back({stage.logical_offset + static_cast<int>(i),
                          split_layer(stage.items[i].symbols, false)});
    allocated_layers += static_cast<int>(stage.items.size());
  }
  if (allocated_layers != pattern.logical_count())
    reject(ErrorCode::BadConfig,
           "pp = " + std::to_string(config.pp) + " x vpp = " + std::to_string(chunks_per_rank) +
               " stages hold " + std::to_string(allocated_layers) + " of the " +
               std::to_string(pattern.logical_count()) + " logical layers of pattern '" +
               pattern.text + "' (" + std::to_string(pattern.segment_count()) +
               " pipe segments); match the segment count to pp x vpp");
  ctx.chunks.front().front().first = true;
  Chunk& last = ctx.chunks.back().back();
  last.last = true;
  for (int depth = 0; depth < pattern.mtp_depths; ++depth)
    last.layers.push_back({depth, split_layer(pattern.mtp, true)});

  // Build every rank from its step list.
  std::vector<std::vector<Bucket>> buckets(static_cast<std::size_t>(config.pp));
  std::vector<double> replicated(static_cast<std::size_t>(config.pp), 0);
  // Every sync mode reduces what the buckets hold: each rank's TP shard of its stage's weights.
  for (int p = 0; p < config.pp; ++p) buckets[static_cast<std::size_t>(p)] = rank_buckets(ctx, p, &replicated[static_cast<std::size_t>(p)]);
  if (ctx.megatron_sync()) check_gradient_transfers(config, options, buckets);
  // With ScheduleOptions::fold only representatives are built (fold.hpp): the lowest rank of
  // each pipeline stage, or of each (stage, EP rank) under skewed routing, whose node sequences
  // every other rank of its class repeats with other peers.
  std::vector<int> built;
  std::vector<int> stands_for;
  const int world = config.global_ranks();
  for (const BuiltRank& b : built_ranks(config, options)) {
    built.push_back(b.rank);
    stands_for.push_back(b.stands_for);
  }
  const bool folded = built.size() < static_cast<std::size_t>(world);
  std::vector<int> plan_rank_of(static_cast<std::size_t>(world), -1);
  for (std::size_t i = 0; i < built.size(); ++i) plan_rank_of[static_cast<std::size_t>(built[i])] = static_cast<int>(i);
  std::vector<RankBuilder> builders;
  for (int r : built) {
    RankBuilder b(ctx, r);
    const auto pp = static_cast<std::size_t>(b.coords().pp);
    b.gather_parameters_first(buckets[pp]);
    for (const PipelineStep& step : pipeline_steps(config, b.coords().pp, options.overlap)) b.run(step);
    b.finish(buckets[pp], replicated[pp]);
    builders.push_back(std::move(b));
  }

  // Assemble: global ids rank after rank, in issue order.
  Plan plan;
  plan.schedule = std::string(schedule_name(config, options));
  plan.pattern = pattern.text;
  plan.pp = config.pp;
  plan.chunks = chunks_per_rank;
  plan.ep = config.ep;
  plan.dp = config.dp;
  plan.tp = config.tp;
  plan.cp = config.cp;
  plan.etp = config.etp;
  plan.microbatches = config.microbatches;
  plan.overlap = options.overlap;
  plan.delay_wgrad = options.delay_wgrad;
  plan.ep_comm_sms = config.ep > 1 ? dispatcher_sms(options.dispatcher) : 0;
  plan.cuda_graphs = options.cuda_graphs;
  plan.expert_load_factor = ctx.route.load_factor;
  plan.expert_node_load_factor = ctx.route.node_load_factor;
  plan.works = std::move(works.works);
  std::vector<int> offset;
  std::map<P2pKey, int> recv_ids;
  if (folded) plan.world = world;
  for (RankBuilder& b : builders) {
    const int base = static_cast<int>(plan.nodes.size());
    offset.push_back(base);
    RankPlan rp;
    rp.rank = static_cast<int>(plan.ranks.size());
    if (folded) {
      rp.original = b.rank();
      rp.stands_for = stands_for[plan.ranks.size()];
    }
    rp.pp_rank = b.coords().pp;
    rp.ep_rank = b.coords().ep;
    rp.dp_rank = b.coords().dp;
    rp.tp_rank = b.coords().tp;
    rp.cp_rank = b.coords().cp;
    for (Node& n : b.nodes) {
      n.id += base;
      n.rank = rp.rank;
      for (int& dep : n.deps) dep += base;
      rp.issue.push_back(n.id);
      plan.nodes.push_back(std::move(n));
    }
    for (const auto& [local, key] : b.recvs) recv_ids.emplace(key, base + local);
    plan.ranks.push_back(std::move(rp));
  }

  // Collectives, numbered in the id order of the node that creates them (the first member of a
  // rendezvous, the send of a p2p pair). The k-th rendezvous of a (kind, group) on a rank meets
  // the k-th of the same kind and group on every other member: all members issue the same
  // sequence.
  std::map<std::tuple<int, int, int, int, int>, int> collective_of;
  auto join = [&](std::tuple<int, int, int, int, int> key, CollectiveKind kind, Group g, int node) {
    auto [it, fresh] = collective_of.try_emplace(key, static_cast<int>(plan.collectives.size()));
    if (fresh) {
      plan.collectives.push_back({it->second, kind, g, {}, {}});
      // A folded plan names every layout rank of a rendezvous; the nodes are the built ones.
      if (folded && kind != CollectiveKind::PointToPoint)
        plan.collectives.back().ranks =
            builders[static_cast<std::size_t>(plan.nodes[static_cast<std::size_t>(node)].rank)].group(g);
    }
    plan.collectives[static_cast<std::size_t>(it->second)].nodes.push_back(node);
    plan.nodes[static_cast<std::size_t>(node)].collective = it->second;
  };
  std::map<int, int> recv_of_send;
  for (std::size_t r = 0; r < builders.size(); ++r) {
    for (const auto& [local, key] : builders[r].sends) {
      const auto it = recv_ids.find(key);
      if (it == recv_ids.end() || (folded && plan_rank_of[static_cast<std::size_t>(key.rank)] < 0))
        throw std::logic_error("pipeline send of rank " + std::to_string(r) + " (microbatch " +
                               std::to_string(key.microbatch) + ") has no matching receive on rank " +
                               std::to_string(key.rank));
      recv_of_send[offset[r] + local] = it->second;
      recv_ids.erase(it);
    }
  }
  if (!recv_ids.empty())
    throw std::logic_error("pipeline receive on rank " + std::to_string(recv_ids.begin()->first.rank) +
                           " has no matching send");
  // Rendezvous: which local node is the k-th of its (kind, group) on its rank.
  std::vector<std::tuple<int, CollectiveKind, Group, int>> rendezvous;  // node, kind, group, k
  for (std::size_t r = 0; r < builders.size(); ++r) {
    std::map<std::pair<CollectiveKind, Group>, int> seen;
    for (const auto& [local, kind, g] : builders[r].collectives_)
      rendezvous.emplace_back(offset[r] + local, kind, g, seen[{kind, g}]++);
  }
  std::sort(rendezvous.begin(), rendezvous.end(),
            [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::size_t next_rendezvous = 0;
  for (std::size_t id = 0; id < plan.nodes.size(); ++id) {
    const int node_id = static_cast<int>(id);
    if (plan.nodes[id].slot == Slot::PipeSend) {
      const int recv = recv_of_send.at(node_id);
      join({-1, node_id, 0, 0, 0}, CollectiveKind::PointToPoint, Group::Pp, node_id);
      join({-1, node_id, 0, 0, 0}, CollectiveKind::PointToPoint, Group::Pp, recv);
      plan.nodes[static_cast<std::size_t>(recv)].deps.push_back(node_id);
    }
    while (next_rendezvous < rendezvous.size() && std::get<0>(rendezvous[next_rendezvous]) == node_id) {
      const auto& [node, kind, g, k] = rendezvous[next_rendezvous++];
      const int leader = builders[static_cast<std::size_t>(plan.nodes[id].rank)].group(g).front();
      join({static_cast<int>(kind), static_cast<int>(g), leader, k, 0}, kind, g, node);
    }
  }
  for (Node& n : plan.nodes) {
    std::sort(n.deps.begin(), n.deps.end());
    n.deps.erase(std::unique(n.deps.begin(), n.deps.end()), n.deps.end());
  }
  plan.account_embedding = split_used.account_embedding;
  plan.account_loss = split_used.account_loss;
  return plan;
}

}  // namespace ht::schedule
