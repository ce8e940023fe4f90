// The schedule builder (see build.hpp). It reads like reference section 3.6: a chunk-level run
// (pre_process, pairs of layers, leftovers, p2p, the deferred W, post_process) made of a
// layer-level run (the 13 steps), made of three verbs that emit one node each: forward, backward
// and weight of a slot. Ranks are built one after the other from the same step list, so the
// members of every collective sit at the same position of their ranks' sequences.
#include "ht/schedule/build.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "ht/patterns/pipeline.hpp"
#include "ht/schedule/costs.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/layer_shape.hpp"
#include "ht/schedule/pipeline_order.hpp"
#include "ht/schedule/plan_size.hpp"

namespace ht::schedule {
namespace {

struct LayerInfo {
  int index = 0;  // global logical layer, or MTP depth
  LayerShape shape;
};

struct Chunk {
  bool first = false;  // holds the embedding (first stage of the model)
  bool last = false;   // holds the loss (last stage of the model)
  std::vector<LayerInfo> layers;  // decoder layers, then MTP depths on the last stage
};

struct Context {
  const ModelDims& dims;
  const ParallelConfig& cfg;
  const ScheduleOptions& opt;
  int mtp_depths = 0;
  std::vector<std::vector<Chunk>> chunks;  // [pp_rank][vp_stage]
};

// A pipeline transfer waiting for its partner on another rank.
struct P2pKey {
  int rank;  // receiving global rank
  Phase phase;
  int microbatch;
  int vp_stage;  // receiver's chunk
  auto operator<=>(const P2pKey&) const = default;
};

class RankBuilder {
 public:
  RankBuilder(const Context& ctx, int rank) : ctx_(ctx), rank_(rank) {
    pp_rank_ = rank / ctx.cfg.dp;
    dp_rank_ = rank % ctx.cfg.dp;
    ep_rank_ = dp_rank_ % ctx.cfg.ep;
    ep_group_ = dp_rank_ / ctx.cfg.ep;
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

  // Gradient all-reduce at the end of the step (non-expert over dp; expert over dp/ep replicas).
  void finish(double non_expert_bytes, double expert_bytes) {
    std::vector<int> chain_ends;
    for (const auto& [key, local] : chain_last_) chain_ends.push_back(local);
    std::sort(chain_ends.begin(), chain_ends.end());
    auto all_reduce = [&](double bytes, int members, const std::vector<int>& peers,
                          const char* what) {
      Node n;
      n.stream = Stream::Comm;
      n.slot = Slot::GradAllReduce;
      n.phase = Phase::Backward;
      n.symbols = what;
      n.mem_bytes = bytes;
      for (int peer : peers)
        if (peer != rank_) n.sends.push_back({peer, 2 * bytes / members});
      n.deps = chain_ends;
      push(std::move(n));
    };
    const int dp = ctx_.cfg.dp, ep = ctx_.cfg.ep;
    if (dp > 1 && non_expert_bytes > 0) {
      std::vector<int> peers;
      for (int d = 0; d < dp; ++d) peers.push_back(pp_rank_ * dp + d);
      all_reduce(non_expert_bytes, dp, peers, "non_expert");
    }
    if (dp > ep && expert_bytes > 0) {
      std::vector<int> peers;
      for (int d = ep_rank_; d < dp; d += ep) peers.push_back(pp_rank_ * dp + d);
      all_reduce(expert_bytes, dp / ep, peers, "expert");
    }
  }

  int rank() const { return rank_; }
  int pp_rank() const { return pp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int ep_rank() const { return ep_rank_; }
  int ep_group() const { return ep_group_; }

  std::vector<Node> nodes;                    // ids and deps are local indices until assembled
  std::vector<std::pair<int, P2pKey>> sends;  // local index, the receive it feeds
  std::vector<std::pair<int, P2pKey>> recvs;  // local index, its own key

 private:
  const Chunk& chunk(int vp) const {
    return ctx_.chunks[static_cast<std::size_t>(pp_rank_)][static_cast<std::size_t>(vp)];
  }

  // Layer-level run: the 13-step host order of reference section 3.6.
  void run_layer(const LayerInfo* f, const std::optional<ChunkRef>& fr, const LayerInfo* b,
                 const std::optional<ChunkRef>& br, bool last_layer_in_bwd) {
    const bool early = ctx_.opt.early_attn_release;
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
  void backward(const LayerInfo& l, Slot s, ChunkRef c) { layer_node(l, s, Phase::Backward, c); }
  void weight(const LayerInfo& l, Slot s, ChunkRef c) {
    if (!ctx_.opt.delay_wgrad) return;
    if (!l.shape.has_weight_grad(s, ctx_.dims.shared_expert_ffn > 0)) return;
    layer_node(l, s, Phase::Weight, c);
  }

  void layer_node(const LayerInfo& l, Slot s, Phase phase, ChunkRef c) {
    if (!l.shape.has_slot(s)) return;  // no-op slots get no node; the order of the rest holds
    Node n;
    n.slot = s;
    n.phase = phase;
    n.layer = l.index;
    n.mtp = l.shape.mtp;
    const auto& d = ctx_.dims;
    const int ep = ctx_.cfg.ep;
    const double skew = ctx_.opt.routing_skew;
    if (s == Slot::Dispatch || s == Slot::Combine) {
      n.stream = Stream::Comm;
      n.symbols = std::string(1, l.shape.terminal);
      for (int peer = 0; peer < ep; ++peer) {
        if (peer == ep_rank_) continue;
        const double out = a2a_bytes(d, ep, skew, s, phase, ep_rank_, peer);
        const double in = a2a_bytes(d, ep, skew, s, phase, peer, ep_rank_);
        n.sends.push_back({ep_peer_rank(peer), out});
        n.mem_bytes += out + in;
      }
    } else {
      n.stream = Stream::Compute;
      n.symbols = s == Slot::Mlp ? std::string(1, l.shape.terminal) : l.shape.symbols;
      const NodeCost cost =
          phase_cost(slot_work(l.shape, s, d, ep, ep_rank_, skew), phase, ctx_.opt.delay_wgrad);
      n.flops = cost.flops;
      n.mem_bytes = cost.mem_bytes;
    }
    emit(std::move(n), c);
  }

  void process(Slot s, Phase phase, ChunkRef c) {
    SlotWork work;
    if (s == Slot::PreProcess) {
      work = embedding_work(ctx_.dims);
    } else {
      // The output layer and loss run once per prediction depth (main + every MTP depth).
      const SlotWork one = output_work(ctx_.dims);
      for (int k = 0; k <= ctx_.mtp_depths; ++k) work += one;
    }
    const NodeCost cost = phase_cost(work, phase, false);  // embedding/output wgrad never delayed
    Node n;
    n.slot = s;
    n.phase = phase;
    n.flops = cost.flops;
    n.mem_bytes = cost.mem_bytes;
    emit(std::move(n), c);
  }

  // The neighbouring stage of chunk c in model order: forward goes to the next stage (the next
  // pp rank, wrapping to pp rank 0 of the next virtual stage), backward to the previous one.
  P2pKey neighbour(Phase direction_of_data, ChunkRef c, bool toward_next) const {
    const int pp = ctx_.cfg.pp;
    int peer_pp = pp_rank_, peer_vp = c.vp_stage;
    if (toward_next) {
      if (++peer_pp == pp) peer_pp = 0, ++peer_vp;
    } else {
      if (--peer_pp < 0) peer_pp = pp - 1, --peer_vp;
    }
    return {peer_pp * ctx_.cfg.dp + dp_rank_, direction_of_data, c.microbatch, peer_vp};
  }

  void pipe_send(Phase phase, ChunkRef c) {
    const P2pKey to = neighbour(phase, c, phase == Phase::Forward);
    Node n;
    n.stream = Stream::Comm;
    n.slot = Slot::PipeSend;
    n.phase = phase;
    n.mem_bytes = pipe_bytes(ctx_.dims);
    n.sends.push_back({to.rank, n.mem_bytes});
    sends.emplace_back(emit(std::move(n), c), to);
  }

  void pipe_recv(Phase phase, ChunkRef c) {
    Node n;
    n.stream = Stream::Comm;
    n.slot = Slot::PipeRecv;
    n.phase = phase;
    n.mem_bytes = pipe_bytes(ctx_.dims);
    recvs.emplace_back(emit(std::move(n), c), P2pKey{rank_, phase, c.microbatch, c.vp_stage});
  }

  int ep_peer_rank(int peer_ep_rank) const {
    return pp_rank_ * ctx_.cfg.dp + ep_group_ * ctx_.cfg.ep + peer_ep_rank;
  }

  // Appends a node of chunk c and chains it after the previous node of the same chunk plan
  // (one event per microbatch chunk, reference section 3.5).
  int emit(Node n, ChunkRef c) {
    n.microbatch = c.microbatch;
    n.vp_stage = c.vp_stage;
    const auto key = std::make_pair(c.microbatch, c.vp_stage);
    const auto it = chain_last_.find(key);
    if (it != chain_last_.end()) n.deps.push_back(it->second);
    const int local = push(std::move(n));
    chain_last_[key] = local;
    return local;
  }

  int push(Node n) {
    n.rank = rank_;
    n.id = static_cast<int>(nodes.size());
    nodes.push_back(std::move(n));
    return nodes.back().id;
  }

  const Context& ctx_;
  int rank_, pp_rank_ = 0, dp_rank_ = 0, ep_rank_ = 0, ep_group_ = 0;
  std::map<std::pair<int, int>, int> chain_last_;
};

[[noreturn]] void reject(ErrorCode code, const std::string& message) {
  throw ScheduleError(code, message);
}

std::string layer_name(const patterns::Item& item, int logical) {
  return "logical layer " + std::to_string(logical) + " (pattern position " +
         std::to_string(item.position) + ")";
}

// Parameter bytes of one pipeline rank: (non-expert, local expert).
std::pair<double, double> stage_parameter_bytes(const Context& ctx, int pp_rank) {
  const auto& d = ctx.dims;
  double non_expert = 0, expert = 0;
  for (const Chunk& c : ctx.chunks[static_cast<std::size_t>(pp_rank)]) {
    if (c.first) non_expert += embedding_params(d);
    if (c.last) non_expert += output_params(d);
    for (const LayerInfo& l : c.layers) {
      if (l.shape.mtp) non_expert += mtp_extra_params(d);
      for (char s : l.shape.symbols) {
        non_expert += non_expert_params(s, d);
        if (s == 'E') expert += (d.num_experts / ctx.cfg.ep) * expert_params_per_expert(d);
      }
    }
  }
  return {non_expert * d.bytes_per_element, expert * d.bytes_per_element};
}

}  // namespace

std::string_view schedule_name(const ParallelConfig& config, const ScheduleOptions& options) {
  if (!options.overlap) return "sequential";
  return config.pp == 1 ? "combined_1f1b" : "interleaved_1f1b";
}

void check_schedule_config(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                           const ParallelConfig& config, const ScheduleOptions& options) {
  validate(dims);
  validate(config);
  validate(options);
  check_plan_size(pattern, config);  // before any O(size) work
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
  if (options.early_attn_release && !overlap)
    reject(ErrorCode::O7_OverlapConfig,
           "early attention memory release needs the overlap schedule, but overlap is off");
  if (overlap && options.cuda_graphs)
    reject(ErrorCode::O2_OverlapCudaGraphs,
           "the EP all-to-all overlap does not support CUDA graphs for grouped hybrid patterns; "
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
  const bool has_moe = pattern.flattened_symbols().find('E') != std::string::npos ||
                       pattern.mtp.find('E') != std::string::npos;
  if (has_moe && dims.num_experts % config.ep != 0)
    reject(ErrorCode::BadConfig, "num_experts = " + std::to_string(dims.num_experts) +
                                     " must be a multiple of ep = " + std::to_string(config.ep));
}

Plan build_plan(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                const ParallelConfig& config, const ScheduleOptions& options) {
  check_schedule_config(pattern, dims, config, options);

  Context ctx{dims, config, options, pattern.mtp_depths, {}};
  const int chunks_per_rank = config.model_chunks();
  ctx.chunks.assign(static_cast<std::size_t>(config.pp),
                    std::vector<Chunk>(static_cast<std::size_t>(chunks_per_rank)));
  patterns::PipelineConfig pipeline;
  pipeline.pp = config.pp;
  if (config.vpp > 0) pipeline.vpp = config.vpp;
  int allocated_layers = 0;
  for (const patterns::StageSlice& stage : patterns::allocate_stages(pattern, pipeline)) {
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
  std::vector<RankBuilder> builders;
  for (int r = 0; r < config.global_ranks(); ++r) {
    RankBuilder b(ctx, r);
    for (const PipelineStep& step : pipeline_steps(config, b.pp_rank(), options.overlap)) b.run(step);
    const auto [non_expert, expert] = stage_parameter_bytes(ctx, b.pp_rank());
    b.finish(non_expert, expert);
    builders.push_back(std::move(b));
  }

  // Assemble: global ids rank after rank, in issue order.
  Plan plan;
  plan.schedule = std::string(schedule_name(config, options));
  plan.pattern = pattern.text;
  plan.pp = config.pp;
  plan.vpp = chunks_per_rank;
  plan.ep = config.ep;
  plan.dp = config.dp;
  plan.microbatches = config.microbatches;
  plan.overlap = options.overlap;
  plan.delay_wgrad = options.delay_wgrad;
  std::vector<int> offset;
  std::map<P2pKey, int> recv_ids;
  for (RankBuilder& b : builders) {
    const int base = static_cast<int>(plan.nodes.size());
    offset.push_back(base);
    RankPlan rp;
    rp.rank = b.rank();
    rp.pp_rank = b.pp_rank();
    rp.ep_rank = b.ep_rank();
    rp.dp_rank = b.dp_rank();
    for (Node& n : b.nodes) {
      n.id += base;
      for (int& dep : n.deps) dep += base;
      rp.issue.push_back(n.id);
      plan.nodes.push_back(std::move(n));
    }
    for (const auto& [local, key] : b.recvs) recv_ids.emplace(key, base + local);
    plan.ranks.push_back(std::move(rp));
  }

  // Collectives, numbered in the id order of the node that creates them (the first member of an
  // all-to-all or all-reduce, the send of a p2p pair).
  std::map<std::tuple<int, int, int, int>, int> collective_of;
  auto join = [&](std::tuple<int, int, int, int> key, CollectiveKind kind, int node) {
    auto [it, fresh] = collective_of.try_emplace(key, static_cast<int>(plan.collectives.size()));
    if (fresh) plan.collectives.push_back({it->second, kind, {}});
    plan.collectives[static_cast<std::size_t>(it->second)].nodes.push_back(node);
    plan.nodes[static_cast<std::size_t>(node)].collective = it->second;
  };
  std::map<int, int> recv_of_send;
  for (std::size_t r = 0; r < builders.size(); ++r) {
    for (const auto& [local, key] : builders[r].sends) {
      const auto it = recv_ids.find(key);
      if (it == recv_ids.end())
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
  std::map<std::pair<int, int>, int> a2a_counter;  // (rank) -> A2A nodes seen
  for (std::size_t id = 0; id < plan.nodes.size(); ++id) {
    Node& n = plan.nodes[id];
    const RankBuilder& b = builders[static_cast<std::size_t>(n.rank)];
    const int node_id = static_cast<int>(id);
    switch (n.slot) {
      case Slot::Dispatch:
      case Slot::Combine: {
        const int k = a2a_counter[{n.rank, 0}]++;
        join({0, b.pp_rank(), b.ep_group(), k}, CollectiveKind::AllToAll, node_id);
        break;
      }
      case Slot::PipeSend: {
        const int recv = recv_of_send.at(node_id);
        join({1, node_id, 0, 0}, CollectiveKind::PointToPoint, node_id);
        join({1, node_id, 0, 0}, CollectiveKind::PointToPoint, recv);
        plan.nodes[static_cast<std::size_t>(recv)].deps.push_back(node_id);
        break;
      }
      case Slot::GradAllReduce: {
        const bool expert = n.symbols == "expert";
        join({2, b.pp_rank(), expert ? 1 : 0, expert ? b.ep_rank() : 0}, CollectiveKind::AllReduce,
             node_id);
        break;
      }
      default: break;
    }
  }
  for (Node& n : plan.nodes) {
    std::sort(n.deps.begin(), n.deps.end());
    n.deps.erase(std::unique(n.deps.begin(), n.deps.end()), n.deps.end());
  }
  return plan;
}

}  // namespace ht::schedule
