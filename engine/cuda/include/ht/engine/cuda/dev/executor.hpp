// The EP-overlap executor on a device: a schedule::Plan (the plan the CPU executor and the SimGrid
// twin run) executed by EP ranks that share one device, over the device layers (dev/*.hpp) and a
// device policy D (dev/host.hpp; dev_cuda.cuh on a GPU).
//
// Streams. Each rank issues its compute nodes on a stream of its own; the group's all-to-alls and
// the gradient all-reduce run on one comm stream. The nodes of one (rank, microbatch) form one
// event chain across both: a node waits for the previous node of its chain, so different
// microbatches overlap only across streams, as in the CPU executor (exec/executor.hpp) and the
// plan's semantics (reference sections 3.5, 5.2).
//
// Issue. One host thread walks the ranks' issue orders round robin: a compute node is issued when
// its rank reaches it; a collective (dispatch, combine, all-reduce) when every member reached it,
// with the copies between the members' buffers (the device-side transport: all ranks live in one
// address space) queued on the comm stream after every member's chain. A plan whose ranks never
// meet at a collective is refused ("deadlock") instead of hanging.
//
// Math. The state of every (rank, microbatch) is its own: per layer, blocks with their caches and
// staged weight gradients, added into the rank's gradients by the slot's weight-gradient step (the
// plan's W node with delayed wgrad, else right after the backward); the hidden state and its
// gradient. As in the CPU executor, a layer's state is built by its first node and released after
// its last, and the chunk's own buffers after the chunk's last node (exec::StateLifetimes), so a
// sequential plan holds one microbatch's state whatever the number of microbatches. With delayed
// wgrad the backward leaves the weight GEMMs of its linear maps to the W node, which runs them
// (exec/weight_steps.hpp, the CPU executor's bookkeeping too; the shared expert's, whose backward
// runs in the combine, belong to pre_dispatch's W). So on one device the overlapped and the
// sequential plan give the same bits, and grouped and flattened patterns too (blocks are found by
// canonical name). The routed rows of each expert are those of every rank of its EP group,
// expert-major with the sources in rank order, as the CPU executor lays them out: on the host
// emulation the device executor equals it bit for bit wherever the device layers equal the CPU's
// (every layer but SwiGLU's exp).
//
// Processes. With a process group (process_group.hpp: mpirun, NCCL on GPUs or MPI on the host
// emulation) each of the P processes runs a contiguous block of n/P ranks: it walks only its
// ranks' issue orders (after one walk over every rank's, so a plan that deadlocks fails on every
// process alike), copies rows between its own ranks and sends or receives the rows of the others
// in one fixed (owner, source, expert) order, and sums a gradient over the ranks in rank order from
// the others' copies it received. The ranks' routing counts, losses and the clipping norm's running
// sum go through the group too, so any split of the ranks over processes gives the bits of one.
//
// MTP depths (reference 3.4) run as the CPU executor runs them: the first depth's pre_dispatch
// applies the final norm, each depth embeds its rolled tokens and projects cat(enorm(embedding),
// hnorm(hidden)) into its inner layer, mtp_post applies its norm, and post_process runs every head
// over the shared output layer; the hidden states two consumers read get their gradients merged
// before their producer's backward. A depth's inner layer lives from its first node to the chunk's
// end.
//
// Scope: PP = 1, VPP = 1, EP dividing DP (DP = EP across processes), up to 8 ranks; the plan's
// other shapes are refused with their reason. With DP > EP each group of EP
// consecutive ranks holds the experts once and exchanges tokens within itself; the DP / EP groups'
// copies of an expert sum their gradients (the plan's expert all-reduce).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/engine/cuda/dev/model.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/node_args.hpp"

namespace ht::engine::dev {

// The ranks' copies of one gradient (up to 8 ranks): every copy becomes x_0 + x_1 + ... in rank
// order (the CPU executor's all-reduce, communicator.hpp), one thread per element.
struct RankBuffers {
  float* g[8];
};
template <class D>
void sum_over_ranks(RankBuffers ptrs, int n, long size) {
  D::launch(size, [=] HT_HD(long i) {
    float acc = ptrs.g[0][i];
    for (int r = 1; r < n; ++r) acc += ptrs.g[r][i];
    for (int r = 0; r < n; ++r) ptrs.g[r][i] = acc;
  });
}

template <class D>
class DevExecutor {
 public:
  using T = float;
  static constexpr int kMaxRanks = 8;  // RankBuffers
  static constexpr const char* kWte = "embedding.word_embeddings.weight";
  static constexpr const char* kFinalNorm = "decoder.final_norm.weight";
  static constexpr const char* kOut = "output_layer.weight";

  using Options = cuda::DeviceExecutorOptions;
  DevExecutor(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed, schedule::Plan plan,
              Options options = {})
      : pattern_(pattern), cfg_(cfg), plan_(std::move(plan)), options_(options) {
    if (auto msg = schedule::beyond_engines(plan_); !msg.empty()) fail(msg);
    if (pattern.mtp_depths > 0 && plan_.overlap)  // the builder's O3, also for plans built without it
      fail("hybrid MTP ('/" + pattern.mtp + "') runs the sequential schedule only (rule O3)");
    if (plan_.pp != 1 || plan_.chunks != 1)
      fail("runs pp 1, vpp 1 only (got pp " + std::to_string(plan_.pp) + ", vpp " +
           std::to_string(plan_.chunks) + ")");
    if (auto msg = exec::plan_mismatch(pattern, plan_, cfg.num_experts); !msg.empty()) fail(msg);
    if (options_.group && plan_.dp != plan_.ep)
      fail("runs DP = EP across processes (every rank holds a shard of the experts); got dp " +
           std::to_string(plan_.dp) + ", ep " + std::to_string(plan_.ep));
    const int n = plan_.global_ranks();
    if (n != plan_.dp || n < 1 || n > kMaxRanks)
      fail("runs 1 to " + std::to_string(kMaxRanks) + " ranks sharing the device; the plan has " +
           std::to_string(n));
    const int procs = group() ? group()->processes() : 1;
    if (n % procs != 0)
      fail(std::to_string(procs) + " processes do not divide the plan's " + std::to_string(n) + " ranks");
    local_n_ = n / procs;
    first_ = (group() ? group()->process() : 0) * local_n_;
    const bool has_moe = pattern.has_moe();
    ep_ = plan_.ep;
    local_experts_ = has_moe ? cfg.num_experts / ep_ : 0;
    // Logical layers: their members' canonical prefixes (blocks are found by canonical name).
    // MTP depth d's inner layer follows them (index trunk_ + d), its members under the depth's names.
    const auto keys = patterns::layer_keys(pattern);
    std::size_t phys = 0;
    const auto add_layer = [this](Layer layer) {
      const char last = layer.symbols.back();
      for (std::size_t i = 0; i + 1 < layer.symbols.size(); ++i)
        if (layer.symbols[i] == '-' || layer.symbols[i] == 'E')
          fail("logical layer '" + layer.symbols + "' has its MLP/MoE before the last member (rule O1)");
      layer.terminal = last == '-' || last == 'E';
      layer.moe = last == 'E';
      layers_.push_back(std::move(layer));
    };
    for (const auto& item : pattern.items()) {
      Layer layer;
      for (const char sym : item.symbols) {
        layer.symbols.push_back(sym);
        layer.prefixes.push_back("layers." + std::to_string(keys.at(phys++).physical) + ".");
      }
      add_layer(std::move(layer));
    }
    trunk_ = static_cast<int>(layers_.size());
    const auto depth_prefixes = patterns::mtp_layer_prefixes(pattern);
    for (int d = 0; d < pattern.mtp_depths; ++d) {
      Layer layer;
      layer.depth_prefix = depth_prefixes.at(static_cast<std::size_t>(d));
      layer.prefixes = patterns::mtp_inner_prefixes(pattern, d);
      layer.loss_scale = T(1) / static_cast<T>(pattern.mtp_depths);
      for (const auto& item : pattern.mtp_items) layer.symbols.push_back(item.symbols.at(0));
      add_layer(std::move(layer));
    }
    for (int r = 0; r < n; ++r) ranks_.push_back(local(r) ? build_rank(r, seed) : Rank{});
  }
  ~DevExecutor() { D::synchronize_all(); }

  int ranks() const { return static_cast<int>(ranks_.size()); }
  // Whether rank r runs in this process (every rank without a process group).
  bool local(int r) const { return r >= first_ && r < first_ + local_n_; }
  const schedule::Plan& plan() const { return plan_; }

  // One step: every rank runs every microbatch forward and backward in plan order, then the
  // non-expert gradients are summed over the ranks (the plan's all-reduce). batches[rank][mb].
  // Gradients accumulate (zero_grad() between steps). The timeline has one device per rank with
  // its compute and comm streams, on the device's clock.
  exec::StepResult step(const std::vector<std::vector<Batch>>& batches) {
    const int n = ranks(), mbs = plan_.microbatches;
    const double tokens = exec::check_step_batches(batches, n, mbs, cfg_.vocab_size, "device executor");
    weight_ = static_cast<T>(1.0 / tokens);  // the CPU executor's CE weight per token
    mtp_weight_ = exec::mtp_weights(batches, pattern_.mtp_depths, cfg_.mtp_loss_scaling);
    chunks_.clear();
    chunks_.resize(static_cast<std::size_t>(n));
    for (int r = first_; r < first_ + local_n_; ++r)
      for (int mb = 0; mb < mbs; ++mb)
        chunks_[static_cast<std::size_t>(r)].push_back(
            new_chunk(batches[static_cast<std::size_t>(r)][static_cast<std::size_t>(mb)]));
    steps_ = std::make_unique<exec::WeightSteps<D, T>>(plan_, first_, local_n_);
    marks_.clear();
    issue_ = exec::issue_orders(plan_, options_.test_weight_fault, kWho);
    lifetimes_.clear();
    for (int r = 0; r < n; ++r) lifetimes_.emplace_back(plan_, issue_[static_cast<std::size_t>(r)]);
    run_plan();
    steps_->finish();

    // This process's ranks' losses, rank-major, summed as the CPU executor sums them: router losses
    // in layer order (MTP depths last), the main loss, then the depths' losses.
    std::vector<double> mine;
    for (int r = first_; r < first_ + local_n_; ++r)
      for (int mb = 0; mb < mbs; ++mb) {
        Chunk& cs = chunk(r, mb);
        double aux = 0;
        for (const double l : cs.router_loss) aux += l;
        double total = cs.loss + aux;
        for (const auto& ms : cs.mtp) total += ms.loss;
        mine.push_back(total);
        mine.push_back(cs.loss);
      }
    const std::vector<double> all = gather(mine);  // (total, main head's) per (rank, microbatch)
    exec::StepResult result;
    result.loss.assign(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(mbs), 0.0));
    for (int r = 0; r < n; ++r)
      for (int mb = 0; mb < mbs; ++mb) {
        const auto at = static_cast<std::size_t>(2 * (r * mbs + mb));
        result.loss[static_cast<std::size_t>(r)][static_cast<std::size_t>(mb)] = all.at(at);
        result.total += all.at(at);
        result.lm += all.at(at + 1);
      }
    result.timeline = timeline();
    chunks_.clear();
    return result;
  }

  void zero_grad() {
    for (auto& rk : ranks_)
      if (rk.params) rk.params->zero_grad();
  }

  // The parameters rank r holds (every non-expert one, its experts), in the host model's order,
  // with their device values and gradients downloaded.
  std::vector<ParamRef<T>> parameters(int r) {
    Rank& rk = held(r);
    D::synchronize_all();
    rk.params->download_params();
    rk.params->download_grads();
    return rk.params->refs();
  }
  bool owns(int r, const std::string& canonical) const {
    const int e = exec::expert_index(canonical);
    return e < 0 ? true : e / local_experts_ == ep_rank(r);
  }

  // AdamW on every rank with one global-norm clip, as exec::Executor::optimizer_step: the norm is
  // one float64 sum rank after rank in the model's parameter order, the non-expert gradients
  // (equal on every rank after the all-reduce) from rank 0 only, experts from their owners; every
  // rank then updates what it holds, so the non-expert copies stay equal. Across processes the
  // running sum passes from process to process in rank order. Returns the norm.
  double optimizer_step(const AdamWConfig& cfg) {
    D::set_stream(0);
    D::synchronize_all();
    if (adam_.size() != ranks_.size()) adam_.resize(ranks_.size());
    double ss = 0;
    const int procs = group() ? group()->processes() : 1, me = first_ / local_n_;
    for (int q = 0; q < procs; ++q) {
      if (q == me)
        for (int r = first_; r < first_ + local_n_; ++r) {
          const auto& refs = ranks_[static_cast<std::size_t>(r)].params->refs();
          ss = ranks_[static_cast<std::size_t>(r)].params->sumsq_grads(
              ss, [&](std::size_t i) { return exec::expert_index(refs[i].canonical) >= 0 ? r < ep_ : r == 0; });
        }
      if (group()) ss = group()->all_gather({ss}).at(static_cast<std::size_t>(q));
    }
    const double norm = std::sqrt(ss);
    const T clip = DevParams<D, T>::clip_factor(cfg, norm);
    for (int r = first_; r < first_ + local_n_; ++r)
      ranks_[static_cast<std::size_t>(r)].params->adamw_apply(cfg, adam_[static_cast<std::size_t>(r)], clip);
    D::synchronize_all();  // returns once every update is done (timing, checkpoints)
    return norm;
  }
  // Rank r's AdamW moments (downloaded) and step; and rank r taking its host parameters' values
  // (parameters(r)'s tensors) and `state`'s moments and step.
  AdamWState<T> optimizer_state(int r) {
    Rank& rk = held(r);
    AdamWState<T> st;
    if (adam_.size() == ranks_.size()) st.step = adam_[static_cast<std::size_t>(r)].step;
    D::synchronize_all();
    rk.params->download_optimizer_state(st);
    return st;
  }
  void restore(int r, const AdamWState<T>& state) {
    Rank& rk = held(r);
    if (adam_.size() != ranks_.size()) adam_.resize(ranks_.size());
    D::set_stream(0);
    D::synchronize_all();
    rk.params->upload_params();
    rk.params->upload_optimizer_state(state);
    adam_[static_cast<std::size_t>(r)] = AdamWState<T>{};
    adam_[static_cast<std::size_t>(r)].step = state.step;
  }

 private:
  struct Layer {
    std::string symbols;
    std::vector<std::string> prefixes;  // canonical "layers.<physical>." per member
    bool terminal = false, moe = false;
    std::string depth_prefix;  // an MTP depth's inner layer: "mtp.layers.<d>." (else empty)
    T loss_scale = T(1);       // router losses: 1 in the trunk, 1 / depths inside MTP (reference 5.1)
  };
  struct Rank {
    std::unique_ptr<HybridModel<T>> host;
    std::unique_ptr<DevParams<D, T>> params;              // the parameters this rank holds
    std::vector<std::vector<std::size_t>> pre_w, mlp_w;  // per layer: what each slot's W step flushes
  };
  using Event = typename D::Event;
  // One logical layer of one (rank, microbatch), from its first node to its last: its blocks with
  // their caches and the staged gradients of its parameters.
  struct LayerState {
    std::unique_ptr<DevParams<D, T>> staged;
    std::vector<DevBlock<D, T>> blocks;
  };
  // One MTP depth of a (rank, microbatch): its rolled tokens and loss weights, the norms and the
  // projection's inputs, its head; `hout` is read by its head and by the next depth, so its
  // gradient `d_hout` has two parts.
  struct MtpState {
    Buf<D, int> ids, targets;
    Buf<D, T> weights, emb, en, hn, en_rstd, hn_rstd, hin, cat, pre, hout, fn_rstd, logits, lse, d_hout;
    double loss = 0;
  };
  // One (rank, microbatch): its layers' states, its hidden state; the losses stay after release.
  struct Chunk {
    std::vector<LayerState> layers;   // the trunk's, then the MTP depths' inner layers
    std::vector<double> router_loss;  // per layer: its blocks' aux + z losses, kept at its release
    std::vector<MtpState> mtp;
    int b = 0, t = 0;
    Buf<D, int> tokens, targets;
    Buf<D, T> h, dh, h_final, fn_rstd, logits, lm_weights, lse;
    Buf<D, T> h_pre_final, d_h_final;  // with MTP: the final norm's input, its output's merged gradient
    double loss = 0;
    bool chained = false;
    Event last{};  // the chain's last node
  };
  struct Mark {
    int rank;
    const schedule::Node* node;
    Event begin, end;
    double gemm_flops = 0;  // the GEMM work the node issued for this rank (D::gemm_flops_total)
    int rows = -1;          // a MoE mlp node: the rows the rank's experts processed
  };

  static constexpr const char* kWho = "device executor";
  [[noreturn]] static void fail(const std::string& message) { exec::walk_fail(kWho, message); }
  static std::string flops_text(double flops) {
    char text[32];
    std::snprintf(text, sizeof text, "%.0f", flops);
    return text;
  }
  // Rank r of this process, or a one-line refusal.
  Rank& held(int r) {
    if (!local(r))
      fail("rank " + std::to_string(r) + " runs in process " + std::to_string(process_of(r)) + ", not in this one");
    return ranks_.at(static_cast<std::size_t>(r));
  }
  Chunk& chunk(int r, int mb) {
    return chunks_.at(static_cast<std::size_t>(r)).at(static_cast<std::size_t>(mb));
  }
  int compute_stream(int r) const { return 1 + r - first_; }
  // Rank r's place in its EP group (EP consecutive ranks; DP / EP groups hold replicas).
  int ep_rank(int r) const { return r % ep_; }
  // The ranks of the EP group [base, base + ep) that run in this process: [first, second).
  std::pair<int, int> local_members(int base) const {
    return {std::max(base, first_), std::min(base + ep_, first_ + local_n_)};
  }
  int comm_stream() const { return 1 + local_n_; }
  cuda::ProcessGroup* group() const { return options_.group; }
  int process_of(int r) const { return r / local_n_; }
  // Every process's `mine`, in process order (this process's alone without a group), on the comm
  // stream; the current stream is kept (after a step, what follows -- releases, zero_grad -- must
  // stay on stream 0, which every rank's first node waits for).
  std::vector<double> gather(const std::vector<double>& mine) {
    if (!group()) return mine;
    const int current = D::stream_id();
    D::set_stream(comm_stream());
    std::vector<double> all = group()->all_gather(mine);
    D::set_stream(current);
    return all;
  }

  Rank build_rank(int r, std::uint64_t seed) {
    Rank rk;
    rk.host = std::make_unique<HybridModel<T>>(pattern_, cfg_, seed);
    std::vector<ParamRef<T>> held;
    for (auto& p : rk.host->parameters()) {
      const int e = exec::expert_index(p.canonical);
      if (e < 0 || e / local_experts_ == ep_rank(r)) {
        held.push_back(p);
      } else {  // drawn for the random stream, then dropped: another rank holds it
        *p.value = Tensor<T>{};
        *p.grad = Tensor<T>{};
      }
    }
    D::set_stream(0);
    rk.params = std::make_unique<DevParams<D, T>>(std::move(held));
    for (const auto& layer : layers_) {
      std::vector<std::size_t> pre, mlp;
      const std::size_t members = layer.symbols.size() - (layer.terminal ? 1 : 0);
      for (std::size_t i = 0; i < members; ++i)
        for (std::size_t k : rk.params->indices(layer.prefixes[i])) pre.push_back(k);
      if (layer.moe) {
        const std::string& pre_e = layer.prefixes.back();
        for (std::size_t k : rk.params->indices(pre_e, "mlp.experts.local_experts.")) pre.push_back(k);
        for (std::size_t k : rk.params->indices(pre_e + "mlp.experts.local_experts.")) mlp.push_back(k);
      } else if (layer.terminal) {
        mlp = rk.params->indices(layer.prefixes.back());
      }
      if (!layer.depth_prefix.empty())  // the depth's own weights go with its pre_dispatch
        for (const char* name : {"eh_proj.weight", "enorm.weight", "hnorm.weight"})
          for (std::size_t k : rk.params->indices(layer.depth_prefix + name)) pre.push_back(k);
      rk.pre_w.push_back(std::move(pre));
      rk.mlp_w.push_back(std::move(mlp));
    }
    return rk;
  }

  Chunk new_chunk(const Batch& batch) {
    D::set_stream(0);
    Chunk cs;
    cs.layers.resize(layers_.size());  // built by the layer's first node
    cs.router_loss.assign(layers_.size(), 0.0);
    cs.b = batch.tokens.dim(0);
    cs.t = batch.tokens.dim(1);
    cs.tokens = upload<D>(batch.tokens.ptr(), batch.tokens.size());
    cs.targets = upload<D>(batch.targets.ptr(), batch.targets.size());
    // Depth d sees the tokens rolled d + 1 steps left and predicts the token d + 1 ahead.
    Tensor<int> ids = batch.tokens, tgt = batch.targets;
    for (std::size_t d = 0; d < mtp_weight_.size(); ++d) {
      MtpState ms;
      ids = roll_left(ids);
      tgt = roll_left(tgt);
      ms.ids = upload<D>(ids.ptr(), ids.size());
      ms.targets = upload<D>(tgt.ptr(), tgt.size());
      std::vector<T> w(static_cast<std::size_t>(cs.b) * cs.t, T(0));
      for (int i = 0; i < cs.b; ++i)
        for (int j = 0; j + static_cast<int>(d) + 1 < cs.t; ++j)
          w[static_cast<std::size_t>(i * cs.t + j)] = mtp_weight_[d];
      ms.weights = upload<D>(w.data(), w.size());
      cs.mtp.push_back(std::move(ms));
    }
    return cs;
  }

  // Layer l's state of rank r's chunk, on the current stream: its parameters' staged gradients and
  // its blocks bound to them.
  LayerState new_layer(int r, std::size_t l) {
    const Rank& rk = ranks_[static_cast<std::size_t>(r)];
    const Layer& layer = layers_[l];
    std::vector<std::size_t> own = rk.pre_w[l];
    own.insert(own.end(), rk.mlp_w[l].begin(), rk.mlp_w[l].end());
    LayerState ls;
    ls.staged = std::make_unique<DevParams<D, T>>(*rk.params, typename DevParams<D, T>::Staging{}, own);
    for (std::size_t i = 0; i < layer.symbols.size(); ++i)
      ls.blocks.push_back(make_dev_block<D, T>(layer.symbols[i], cfg_, *ls.staged, layer.prefixes[i], layer.loss_scale,
                                               ExpertShard{ep_rank(r) * local_experts_, local_experts_}));
    return ls;
  }
  // A node of a local rank, in its issue order (exec::StateLifetimes): before it runs, the layer
  // state it begins; after it (on the node's stream, which the next user of the freed memory
  // follows), the layer state and the chunk buffers it ends.
  exec::StateLifetimes::Ends begin_node(const schedule::Node& node) {
    const auto ends = lifetimes_.at(static_cast<std::size_t>(node.rank)).next(node);
    if (ends.first)
      chunk(node.rank, node.microbatch).layers.at(static_cast<std::size_t>(node.layer)) =
          new_layer(node.rank, static_cast<std::size_t>(node.layer));
    return ends;
  }
  void end_node(const schedule::Node& node, exec::StateLifetimes::Ends ends) {
    if (!ends.last && !ends.chunk_done) return;
    Chunk* cs = &chunk(node.rank, node.microbatch);
    const auto release = [cs](std::size_t l) {
      double loss = 0;
      for (auto& blk : cs->layers[l].blocks)
        loss += static_cast<double>(blk.branch->aux_loss()) + static_cast<double>(blk.branch->z_loss());
      cs->router_loss[l] = loss;
      cs->layers[l] = LayerState{};
    };
    if (ends.last) release(static_cast<std::size_t>(node.layer));
    if (!ends.chunk_done) return;
    for (std::size_t l = static_cast<std::size_t>(trunk_); l < layers_.size(); ++l) release(l);  // MTP depths
    for (auto* b : {&cs->h, &cs->dh, &cs->h_final, &cs->fn_rstd, &cs->logits, &cs->lm_weights, &cs->lse,
                    &cs->h_pre_final, &cs->d_h_final})
      *b = {};
    for (auto& ms : cs->mtp) {
      const double loss = ms.loss;
      ms = MtpState{};
      ms.loss = loss;
    }
  }
  // The layer state a node runs: a trunk layer's, or (an MTP node) its depth's inner layer's.
  std::size_t index_of(const schedule::Node& node) const {
    return static_cast<std::size_t>(node.mtp ? trunk_ + node.layer : node.layer);
  }

  MoeBranchD<D, T>& moe_of(int r, int mb, std::size_t layer) {
    auto& blocks = chunk(r, mb).layers.at(layer).blocks;
    auto* m = dynamic_cast<MoeBranchD<D, T>*>(blocks.back().branch.get());
    if (!m) fail("layer " + std::to_string(layer) + " has no MoE terminal for its all-to-all");
    return *m;
  }

  void run_plan() {
    if (group()) exec::refuse_deadlock(plan_, issue_, kWho);
    exec::walk_plan(plan_, issue_, first_, first_ + local_n_, kWho, [this](const schedule::Node& node) { run_compute(node); },
                    [this](const std::vector<const schedule::Node*>& members) { run_collective(members); });
    D::set_stream(0);
  }

  void check_mb(const schedule::Node& node) const {
    if (node.microbatch < 0 || node.microbatch >= plan_.microbatches)
      fail("node " + node.label() + " names microbatch " + std::to_string(node.microbatch));
  }
  const Layer& layer_of(const schedule::Node& node) const {
    const int count = node.mtp ? static_cast<int>(layers_.size()) - trunk_ : trunk_;
    if (node.layer < 0 || node.layer >= count) fail("node " + node.label() + " names no layer");
    return layers_[index_of(node)];
  }

  void run_compute(const schedule::Node& node) {
    check_mb(node);
    const int r = node.rank;
    Chunk& cs = chunk(r, node.microbatch);
    D::set_stream(compute_stream(r));
    if (cs.chained) D::wait(cs.last);
    const auto ends = begin_node(node);
    const Event begin = D::record();
    const double flops = D::gemm_flops_total();
    compute(node, cs);
    cs.last = D::record();
    cs.chained = true;
    const bool experts = node.slot == schedule::Slot::Mlp && layer_of(node).moe;
    marks_.push_back({r, &node, begin, cs.last, D::gemm_flops_total() - flops,
                      experts ? moe_of(r, node.microbatch, index_of(node)).shard().rows() : -1});
    end_node(node, ends);
  }

  void compute(const schedule::Node& node, Chunk& cs) {
    using schedule::Phase;
    using schedule::Slot;
    const int c = cfg_.hidden, n = cs.b * cs.t, v = cfg_.vocab_size, r = node.rank;
    const std::size_t nc = static_cast<std::size_t>(n) * c;
    const T eps = static_cast<T>(cfg_.norm_eps);
    Rank& rk = ranks_[static_cast<std::size_t>(r)];
    DevParams<D, T>& p = *rk.params;
    const bool fwd = node.phase == Phase::Forward, bwd = node.phase == Phase::Backward;
    switch (node.slot) {
      case Slot::PreProcess:
        if (fwd) {
          cs.h.resize(nc);
          embedding_forward<D, T>(cs.h.get(), cs.tokens.get(), p.w(kWte), n, c);
        } else if (bwd) {
          embedding_backward<D, T>(p.g(kWte), cs.dh.get(), cs.tokens.get(), n, c);
        }
        return;
      case Slot::PostProcess:
        if (fwd) {
          if (cs.mtp.empty()) final_norm_forward(cs, cs.h, p);  // with MTP the first depth applied it
          cs.logits.resize(static_cast<std::size_t>(n) * v);
          output_forward<D, T>(cs.logits.get(), cs.h_final.get(), p.w(kOut), n, c, v);
          const std::vector<T> w(static_cast<std::size_t>(n), weight_);
          cs.lm_weights = upload<D>(w.data(), w.size());
          cs.lse.resize(static_cast<std::size_t>(n));
          cs.loss = static_cast<double>(
              cross_entropy_forward<D, T>(cs.lse.get(), cs.logits.get(), cs.targets.get(), cs.lm_weights.get(), n, v));
          for (auto& ms : cs.mtp) {  // every depth's head over the shared output layer
            ms.logits.resize(static_cast<std::size_t>(n) * v);
            output_forward<D, T>(ms.logits.get(), ms.hout.get(), p.w(kOut), n, c, v);
            ms.lse.resize(static_cast<std::size_t>(n));
            ms.loss = static_cast<double>(
                cross_entropy_forward<D, T>(ms.lse.get(), ms.logits.get(), ms.targets.get(), ms.weights.get(), n, v));
          }
        } else if (bwd) {
          // The output layer's gradient sums the heads last depth first, then the main head (as the
          // CPU executor); each head's hidden-state gradient is the first part of a merged one.
          for (auto it = cs.mtp.rbegin(); it != cs.mtp.rend(); ++it)
            head_backward(it->d_hout, it->logits, it->targets, it->weights, it->lse, it->hout, p, n);
          Buf<D, T> dhf;
          head_backward(dhf, cs.logits, cs.targets, cs.lm_weights, cs.lse, cs.h_final, p, n);
          if (!cs.mtp.empty()) {
            cs.d_h_final = std::move(dhf);
            return;
          }
          cs.dh.assign_zero(nc);
          rmsnorm_backward<D, T>(cs.dh.get(), p.g(kFinalNorm), dhf.get(), cs.h.get(), p.w(kFinalNorm), cs.fn_rstd.get(), n, c);
        }
        return;
      case Slot::MtpPost: {
        if (!node.mtp) fail("node " + node.label() + " is mtp_post of a decoder layer");
        MtpState& ms = cs.mtp.at(static_cast<std::size_t>(node.layer));
        const std::string norm = layer_of(node).depth_prefix + "final_layernorm.weight";
        // Its weight gradient is never delayed (the slot has no W node).
        if (fwd) {
          ms.pre = std::move(cs.h);
          ms.hout.resize(nc);
          ms.fn_rstd.resize(static_cast<std::size_t>(n));
          rmsnorm_forward<D, T>(ms.hout.get(), ms.fn_rstd.get(), ms.pre.get(), p.w(norm), n, c, eps);
        } else if (bwd) {  // d_hout is whole: its head and the next depth both ran before
          cs.dh.assign_zero(nc);
          rmsnorm_backward<D, T>(cs.dh.get(), p.g(norm), ms.d_hout.get(), ms.pre.get(), p.w(norm),
                                 ms.fn_rstd.get(), n, c);
        }
        return;
      }
      case Slot::PreDispatch: {
        const Layer& layer = layer_of(node);
        const std::size_t l = index_of(node);
        LayerState& ls = cs.layers[l];
        if (node.mtp && fwd) {  // the depth's layer state lives from here to the chunk's end
          ls = new_layer(r, l);
          mtp_forward(node.layer, cs, p, ls);
        }
        auto& blocks = ls.blocks;
        const std::size_t members = blocks.size() - (layer.terminal ? 1 : 0);
        if (fwd) {
          for (std::size_t i = 0; i < members; ++i) blocks[i].forward(cs.h, eps, cs.b, cs.t, c);
          if (layer.moe) blocks.back().forward_part(0, cs.h, eps, cs.b, cs.t, c);
        }
        const auto flush = [&] { ls.staged->add_grads_to(p, rk.pre_w[l]); };
        if (bwd)
          // The MoE's router and norm (its residual's gradient is dh, parked since the combine),
          // then the members in reverse, their weight GEMMs to the slot's W node when it has one.
          steps_->backward(node, [&](WgradSink<T>* w) {
            if (layer.moe) blocks.back().backward_part(2, cs.dh, cs.b, cs.t, c);
            for (std::size_t i = members; i-- > 0;) blocks[i].backward(cs.dh, cs.b, cs.t, c, w);
            if (node.mtp) mtp_backward(node.layer, cs, p, ls, w);
          }, flush);
        else if (!fwd)
          steps_->weight(node, flush);
        return;
      }
      case Slot::Mlp: {
        const Layer& layer = layer_of(node);
        if (!layer.terminal) return;
        LayerState& ls = cs.layers[index_of(node)];
        auto& blk = ls.blocks.back();
        if (fwd) {
          if (layer.moe) blk.forward_part(1, cs.h, eps, cs.b, cs.t, c);
          else blk.forward(cs.h, eps, cs.b, cs.t, c);
          return;
        }
        const auto flush = [&] { ls.staged->add_grads_to(p, rk.mlp_w[index_of(node)]); };
        if (bwd)
          steps_->backward(node, [&](WgradSink<T>* w) {
            if (layer.moe) blk.backward_part(1, cs.dh, cs.b, cs.t, c, w);
            else blk.backward(cs.dh, cs.b, cs.t, c, w);
          }, flush);
        else
          steps_->weight(node, flush);
        return;
      }
      default:
        fail("slot " + std::string(schedule::to_string(node.slot)) + " of node " + node.label() +
             " does not run on the device executor");
    }
  }

  // The main final norm of h into the chunk's h_final.
  void final_norm_forward(Chunk& cs, const Buf<D, T>& h, DevParams<D, T>& p) {
    const int n = cs.b * cs.t, c = cfg_.hidden;
    cs.h_final.resize(static_cast<std::size_t>(n) * c);
    cs.fn_rstd.resize(static_cast<std::size_t>(n));
    rmsnorm_forward<D, T>(cs.h_final.get(), cs.fn_rstd.get(), h.get(), p.w(kFinalNorm), n, c,
                          static_cast<T>(cfg_.norm_eps));
  }
  // One head's backward: its cross-entropy and the shared output layer, into dh (made here).
  void head_backward(Buf<D, T>& dh, const Buf<D, T>& logits, const Buf<D, int>& targets, const Buf<D, T>& weights,
                     const Buf<D, T>& lse, const Buf<D, T>& h, DevParams<D, T>& p, int n) {
    const int c = cfg_.hidden, v = cfg_.vocab_size;
    Buf<D, T> dlogits;
    dlogits.assign_zero(static_cast<std::size_t>(n) * v);
    dh.assign_zero(static_cast<std::size_t>(n) * c);
    cross_entropy_backward<D, T>(dlogits.get(), logits.get(), targets.get(), weights.get(), lse.get(), n, v, T(1));
    output_backward<D, T>(dh.get(), p.g(kOut), dlogits.get(), h.get(), p.w(kOut), n, c, v);
  }
  // MTP depth d's pre_dispatch before its inner layer's: the first depth applies the final norm
  // (the chunk's decoder output); the depth embeds its rolled tokens and projects cat(enorm(emb),
  // hnorm(h)) into cs.h, the embedding half first, as Megatron concatenates.
  void mtp_forward(int d, Chunk& cs, DevParams<D, T>& p, LayerState& ls) {
    MtpState& ms = cs.mtp.at(static_cast<std::size_t>(d));
    const std::string& pre = layers_[static_cast<std::size_t>(trunk_ + d)].depth_prefix;
    const int n = cs.b * cs.t, c = cfg_.hidden;
    const std::size_t nc = static_cast<std::size_t>(n) * c;
    const T eps = static_cast<T>(cfg_.norm_eps);
    if (d == 0) {
      cs.h_pre_final = std::move(cs.h);
      final_norm_forward(cs, cs.h_pre_final, p);
    }
    for (auto* b : {&ms.emb, &ms.en, &ms.hn, &ms.hin}) b->resize(nc);
    for (auto* b : {&ms.en_rstd, &ms.hn_rstd}) b->resize(static_cast<std::size_t>(n));
    embedding_forward<D, T>(ms.emb.get(), ms.ids.get(), p.w(kWte), n, c);
    rmsnorm_forward<D, T>(ms.en.get(), ms.en_rstd.get(), ms.emb.get(), ls.staged->w(pre + "enorm.weight"), n, c, eps);
    D::copy(ms.hin.get(), (d == 0 ? cs.h_final : cs.mtp[static_cast<std::size_t>(d - 1)].hout).get(), nc);
    rmsnorm_forward<D, T>(ms.hn.get(), ms.hn_rstd.get(), ms.hin.get(), ls.staged->w(pre + "hnorm.weight"), n, c, eps);
    ms.cat.resize(2 * nc);
    concat_rows<D, T>(ms.cat.get(), ms.en.get(), ms.hn.get(), n, c);
    cs.h.resize(nc);
    D::gemm(cs.h.get(), ms.cat.get(), ls.staged->w(pre + "eh_proj.weight"), n, c, 2 * c, false, true, false);
  }
  // Its backward after the inner layer's (cs.dh: the projection's output gradient): the
  // projection (its weight GEMM to the W node when it has one), the norms, the embedding; the
  // hidden state it read gets its second part, and the first depth runs the final norm's backward.
  void mtp_backward(int d, Chunk& cs, DevParams<D, T>& p, LayerState& ls, WgradSink<T>* w) {
    MtpState& ms = cs.mtp.at(static_cast<std::size_t>(d));
    const std::string& pre = layers_[static_cast<std::size_t>(trunk_ + d)].depth_prefix;
    const int n = cs.b * cs.t, c = cfg_.hidden;
    const std::size_t nc = static_cast<std::size_t>(n) * c;
    DevParams<D, T>& st = *ls.staged;
    Buf<D, T> dcat, den(nc), dhn(nc), demb, dhin;
    dcat.assign_zero(2 * nc);
    D::gemm(dcat.get(), cs.dh.get(), st.w(pre + "eh_proj.weight"), n, 2 * c, c, false, false, true);
    weight_gemm<D, T>(st.g(pre + "eh_proj.weight"), cs.dh.get(), ms.cat.get(), n, 2 * c, c, w);
    split_rows<D, T>(den.get(), dhn.get(), dcat.get(), n, c);
    demb.assign_zero(nc);
    rmsnorm_backward<D, T>(demb.get(), st.g(pre + "enorm.weight"), den.get(), ms.emb.get(), st.w(pre + "enorm.weight"),
                           ms.en_rstd.get(), n, c);
    embedding_backward<D, T>(p.g(kWte), demb.get(), ms.ids.get(), n, c);
    dhin.assign_zero(nc);
    rmsnorm_backward<D, T>(dhin.get(), st.g(pre + "hnorm.weight"), dhn.get(), ms.hin.get(), st.w(pre + "hnorm.weight"),
                           ms.hn_rstd.get(), n, c);
    Buf<D, T>& parked = d == 0 ? cs.d_h_final : cs.mtp[static_cast<std::size_t>(d - 1)].d_hout;
    add_inplace<D, T>(parked.get(), dhin.get(), static_cast<long>(nc));
    if (d > 0) return;
    cs.dh.assign_zero(nc);  // the final norm's backward, once, on the merged gradient
    rmsnorm_backward<D, T>(cs.dh.get(), p.g(kFinalNorm), cs.d_h_final.get(), cs.h_pre_final.get(), p.w(kFinalNorm),
                           cs.fn_rstd.get(), n, c);
  }

  // ---- collectives on the comm stream: the members' exchanges, after every member's chain ----
  void run_collective(const std::vector<const schedule::Node*>& members) {
    using schedule::Phase;
    using schedule::Slot;
    const schedule::Node& first = *members.front();
    D::set_stream(comm_stream());
    if (first.slot == Slot::GradAllReduce) {
      if (first.symbols != "expert" && first.symbols != "non_expert")
        fail("all-reduce " + first.label() + " of '" + first.symbols + "' gradients is not run");
      for (const auto* m : members)
        if (local(m->rank))
          for (auto& cs : chunks_.at(static_cast<std::size_t>(m->rank)))
            if (cs.chained) D::wait(cs.last);
      const Event begin = D::record();
      all_reduce(members);
      const Event end = D::record();
      // Later nodes of every chain (none in a step's plan) would follow the all-reduce.
      for (const auto* m : members)
        if (local(m->rank)) {
          marks_.push_back({m->rank, m, begin, end});
          for (auto& cs : chunks_.at(static_cast<std::size_t>(m->rank))) cs.last = end, cs.chained = true;
        }
      return;
    }
    if (first.slot != Slot::Dispatch && first.slot != Slot::Combine)
      fail("comm node " + first.label() + " (" + std::string(schedule::to_string(first.slot)) + ") does not run on the device executor");
    const int base = first.rank - ep_rank(first.rank);  // the EP group: ranks [base, base + ep)
    if (static_cast<int>(members.size()) != ep_) fail("all-to-all " + first.label() + " does not span the EP group");
    for (const auto* m : members) {
      check_mb(*m);
      if (m->slot != first.slot || m->phase != first.phase || m->microbatch != first.microbatch ||
          m->layer != first.layer || m->mtp != first.mtp)
        fail("all-to-all pairs " + first.label() + " with " + m->label());
      if (!layer_of(*m).moe) fail("node " + m->label() + " is a comm node of a dense layer");
      if (m->rank < base || m->rank >= base + ep_)
        fail("all-to-all " + first.label() + " spans ranks of two EP groups");
      if (!local(m->rank)) continue;
      Chunk& cs = chunk(m->rank, m->microbatch);
      if (cs.chained) D::wait(cs.last);
    }
    std::map<const schedule::Node*, exec::StateLifetimes::Ends> ends;
    for (const auto* m : members)
      if (local(m->rank)) ends[m] = begin_node(*m);
    const int mb = first.microbatch;
    const std::size_t layer = index_of(first);
    std::map<int, double> combine_flops;  // rank -> the shared expert's GEMMs in its combine backward
    const Event begin = D::record();
    const T eps = static_cast<T>(cfg_.norm_eps);
    const int c = cfg_.hidden;
    const auto [lo, hi] = local_members(base);
    if (first.slot == Slot::Dispatch && first.phase == Phase::Forward) {
      dispatch_layout(mb, layer, base);
      exchange(mb, layer, base, false, true);
    } else if (first.slot == Slot::Dispatch) {
      exchange(mb, layer, base, true, false);
    } else if (first.phase == Phase::Forward) {
      exchange(mb, layer, base, false, false);
      for (int r = lo; r < hi; ++r) {
        Chunk& cs = chunk(r, mb);
        cs.layers[layer].blocks.back().forward_part(2, cs.h, eps, cs.b, cs.t, c);
      }
    } else {
      for (int r = lo; r < hi; ++r) {
        Chunk& cs = chunk(r, mb);
        // The shared expert's backward runs here; its weight GEMMs belong to pre_dispatch's W node
        // (reference 3.3: its forward and the rest of its slot are pre_dispatch's).
        const double before = D::gemm_flops_total();
        cs.layers[layer].blocks.back().backward_part(0, cs.dh, cs.b, cs.t, c,
                                                     steps_->sink({r, mb, first.mtp, first.layer, Slot::PreDispatch}));
        combine_flops[r] = D::gemm_flops_total() - before;
        if (options_.test_drop_residual_grad) cs.dh.assign_zero(cs.dh.size());
      }
      exchange(mb, layer, base, true, true);
    }
    const Event end = D::record();
    for (const auto* m : members) {
      if (!local(m->rank)) continue;
      Chunk& cs = chunk(m->rank, mb);
      cs.last = end;
      cs.chained = true;
      marks_.push_back({m->rank, m, begin, end, combine_flops[m->rank]});
    }
    for (const auto& [m, e] : ends) end_node(*m, e);
  }

  // Rows per (source, local expert) from the sources' routing: each expert's rows, sources in rank
  // order (exec::expert_major_rows), in the EP group [base, base + ep). The sources' counts come
  // from every process (a process group runs one EP group: DP = EP).
  void dispatch_layout(int mb, std::size_t layer, int base) {
    const int le_n = local_experts_, e_n = cfg_.num_experts;
    const auto [lo, hi] = local_members(base);
    std::vector<double> mine;
    for (int s = lo; s < hi; ++s)
      for (const int k : moe_of(s, mb, layer).cache().tokens_per_expert) mine.push_back(k);
    const std::vector<double> routed = gather(mine);  // [source in the group][expert]
    if (routed.size() != static_cast<std::size_t>(ep_) * e_n)
      fail("routing counts of " + std::to_string(routed.size() / e_n) + " ranks for " + std::to_string(ep_));
    for (int p = lo; p < hi; ++p) {
      MoeShardD<D, T>& sh = moe_of(p, mb, layer).shard();
      sh.counts.assign(static_cast<std::size_t>(ep_), std::vector<int>(static_cast<std::size_t>(le_n), 0));
      for (int s = 0; s < ep_; ++s)
        for (int le = 0; le < le_n; ++le)
          sh.counts[static_cast<std::size_t>(s)][static_cast<std::size_t>(le)] =
              static_cast<int>(routed[static_cast<std::size_t>(s * e_n + ep_rank(p) * le_n + le)]);
      exec::expert_major_rows(sh.counts, le_n, sh.offset, sh.start);
    }
  }
  // The all-to-all's transfers. Toward the experts: each source's permuted rows (forward:
  // permuted_in; backward: d permuted_out) into the experts' owners (shard in / dout); back to the
  // tokens: the experts' rows (forward: shard out; backward: shard din) to the ranks whose tokens
  // they are, in their permuted order (permuted_out / d permuted_in). Between two ranks of this
  // process a device copy, else a send or a receive, posted in (owner, source, expert) order on
  // both sides. The transfers are disjoint, so their order does not change a bit.
  void exchange(int mb, std::size_t layer, int base, bool backward, bool toward_experts) {
    const int le_n = local_experts_;
    const std::size_t c = static_cast<std::size_t>(cfg_.hidden);
    const auto idx = [](int i) { return static_cast<std::size_t>(i); };
    const auto [lo, hi] = local_members(base);
    for (int r = lo; r < hi; ++r) {
      if (toward_experts) {
        MoeShardD<D, T>& sh = moe_of(r, mb, layer).shard();
        (backward ? sh.dout : sh.in).resize(static_cast<std::size_t>(sh.rows()) * c);
      } else {
        MoeCacheD<D, T>& cache = moe_of(r, mb, layer).cache();
        (backward ? cache.dpi : cache.permuted_out).resize(static_cast<std::size_t>(cache.n) * cache.k * c);
      }
    }
    if (group()) group()->begin();
    for (int p = base; p < base + ep_; ++p) {
      MoeShardD<D, T>* sh = local(p) ? &moe_of(p, mb, layer).shard() : nullptr;
      T* expert_rows = !sh ? nullptr : toward_experts ? (backward ? sh->dout : sh->in).get() : (backward ? sh->din : sh->out).get();
      const int e0 = ep_rank(p) * le_n;  // p's first expert
      for (int s = base; s < base + ep_; ++s) {
        if (!sh && !local(s)) continue;
        MoeCacheD<D, T>* cache = local(s) ? &moe_of(s, mb, layer).cache() : nullptr;
        T* token_rows = !cache ? nullptr
                        : toward_experts ? (backward ? cache->dpo : cache->permuted_in).get()
                                         : (backward ? cache->dpi : cache->permuted_out).get();
        for (int le = 0; le < le_n; ++le) {
          const auto cnt = static_cast<std::size_t>(sh ? sh->counts[idx(s - base)][idx(le)]
                                                       : cache->tokens_per_expert.at(idx(e0 + le)));
          if (cnt == 0) continue;
          T* at = sh ? expert_rows + static_cast<std::size_t>(sh->offset[idx(s - base)][idx(le)]) * c : nullptr;
          T* from = cache ? token_rows + static_cast<std::size_t>(cache->expert_offset.at(idx(e0 + le))) * c : nullptr;
          if (sh && cache) {
            if (toward_experts) D::copy(at, from, cnt * c);
            else D::copy(from, at, cnt * c);
          } else if (sh) {  // the source is another process's
            if (toward_experts) group()->recv(at, cnt * c, process_of(s));
            else group()->send(at, cnt * c, process_of(s));
          } else {  // the owner is another process's
            if (toward_experts) group()->send(from, cnt * c, process_of(p));
            else group()->recv(from, cnt * c, process_of(p));
          }
        }
      }
    }
    if (group()) group()->end();
  }
  // The non-expert gradients over the DP group, or (DP > EP) the experts' over their replicas:
  // every member's copy becomes the sum in rank order (the CPU executor's all-reduce), one thread
  // per element reading every member's buffer: this process's ranks' own, the other processes'
  // ranks' received (each process sends its ranks' copies to every other).
  void all_reduce(const std::vector<const schedule::Node*>& members) {
    if (members.size() < 2) return;
    const bool experts = members.front()->symbols == "expert";
    DevParams<D, T>& first = *ranks_[static_cast<std::size_t>(experts ? members.front()->rank : first_)].params;
    std::vector<std::size_t> shared;  // the parameters summed, by index
    for (std::size_t i = 0; i < first.count(); ++i)
      if ((exec::expert_index(first.refs()[i].canonical) >= 0) == experts) shared.push_back(i);
    std::vector<std::vector<Buf<D, T>>> received(members.size());  // [member][shared index]
    if (group()) {
      const int procs = group()->processes(), me = group()->process();
      group()->begin();
      for (std::size_t m = 0; m < members.size(); ++m) {
        const int q = members[m]->rank;
        for (std::size_t k = 0; k < shared.size(); ++k) {
          const std::size_t i = shared[k];
          if (local(q)) {
            for (int pr = 0; pr < procs; ++pr)
              if (pr != me) group()->send(ranks_[static_cast<std::size_t>(q)].params->grad_at(i), first.size_at(i), pr);
          } else {
            received[m].emplace_back(first.size_at(i));
            group()->recv(received[m].back().get(), first.size_at(i), process_of(q));
          }
        }
      }
      group()->end();
    }
    for (std::size_t k = 0; k < shared.size(); ++k) {
      const std::size_t i = shared[k];
      RankBuffers ptrs{};
      for (std::size_t m = 0; m < members.size(); ++m) {
        const int q = members[m]->rank;
        if (!local(q)) {
          ptrs.g[m] = received[m][k].get();
          continue;
        }
        DevParams<D, T>& pm = *ranks_[static_cast<std::size_t>(q)].params;
        if (pm.refs()[i].canonical != first.refs()[i].canonical)
          fail("the all-reduce's ranks hold different parameters");
        ptrs.g[m] = pm.grad_at(i);
      }
      sum_over_ranks<D>(ptrs, static_cast<int>(members.size()), static_cast<long>(first.size_at(i)));
    }
  }

  traces::Timeline timeline() {
    traces::Timeline t;
    t.source = "engine";
    t.metadata["device_executor"] = D::kName;
    t.metadata["schedule"] = plan_.schedule;
    t.metadata["pattern"] = plan_.pattern;
    for (int r = first_; r < first_ + local_n_; ++r) {
      t.streams.push_back({r, 0, "compute", traces::Role::Compute});
      t.streams.push_back({r, 1, "comm", traces::Role::Comm});
    }
    if (marks_.empty()) return t;
    D::synchronize_all();
    Event origin = marks_.front().begin;
    for (const auto& m : marks_) {
      traces::Span s;
      s.name = m.node->label();
      s.category = std::string(schedule::to_string(m.node->slot));
      s.start_s = D::seconds(origin, m.begin);
      s.duration_s = D::seconds(m.begin, m.end);
      s.device = m.rank;
      s.args = schedule::node_args(*m.node);
      s.args["gemm_flops"] = flops_text(m.gemm_flops);
      if (m.rows >= 0) s.args["rows"] = std::to_string(m.rows);  // expert load, as the CPU executor's
      if (m.node->stream == schedule::Stream::Comm) {
        s.stream = 1;
        s.role = traces::Role::Comm;
      }
      t.spans.push_back(std::move(s));
    }
    // Events are shared by a collective's members: release each once.
    std::set<Event> released;
    for (const auto& m : marks_) {
      if (released.insert(m.begin).second) D::release_event(m.begin);
      if (released.insert(m.end).second) D::release_event(m.end);
    }
    marks_.clear();
    return t;
  }

  patterns::ParsedPattern pattern_;
  ModelConfig cfg_;
  schedule::Plan plan_;
  Options options_;
  int ep_ = 1, local_experts_ = 0;
  int first_ = 0, local_n_ = 1;  // this process's ranks: [first_, first_ + local_n_)
  std::vector<Layer> layers_;
  std::vector<Rank> ranks_;
  std::vector<AdamWState<T>> adam_;  // per rank, from the first optimizer_step
  std::vector<std::vector<Chunk>> chunks_;  // [rank][microbatch] (this process's ranks), during a step
  std::unique_ptr<exec::WeightSteps<D, T>> steps_;  // the W nodes of this process's ranks, during a step
  std::vector<std::vector<int>> issue_;             // [rank] issue order (exec::issue_order)
  std::vector<exec::StateLifetimes> lifetimes_;     // [rank], during a step
  std::vector<Mark> marks_;
  T weight_ = 0;
  std::vector<T> mtp_weight_;  // per MTP depth: the CE weight of a valid position, this step
  int trunk_ = 0;              // the trunk's logical layers (the MTP depths' inner layers follow)
};


// device_executor.hpp's interface over DevExecutor<D>.
template <class D>
class ExecutorOn final : public cuda::DeviceExecutor {
 public:
  ExecutorOn(const patterns::ParsedPattern& p, const ModelConfig& cfg, std::uint64_t seed, schedule::Plan plan,
             cuda::DeviceExecutorOptions options, std::string device)
      : ex_(p, cfg, seed, std::move(plan), options),
        device_(std::move(device)) {}
  std::string device() const override { return device_; }
  int ranks() const override { return ex_.ranks(); }
  bool local(int rank) const override { return ex_.local(rank); }
  const schedule::Plan& plan() const override { return ex_.plan(); }
  exec::StepResult step(const std::vector<std::vector<Batch>>& batches) override { return ex_.step(batches); }
  void zero_grad() override { ex_.zero_grad(); }
  double optimizer_step(const AdamWConfig& cfg) override { return ex_.optimizer_step(cfg); }
  std::vector<ParamRef<float>> parameters(int rank) override { return ex_.parameters(rank); }
  bool owns(int rank, const std::string& canonical) const override { return ex_.owns(rank, canonical); }
  AdamWState<float> optimizer_state(int rank) override { return ex_.optimizer_state(rank); }
  void restore(int rank, const AdamWState<float>& state) override { ex_.restore(rank, state); }

 private:
  DevExecutor<D> ex_;
  std::string device_;
};

}  // namespace ht::engine::dev
