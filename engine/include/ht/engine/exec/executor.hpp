// The EP-overlap executor: runs a schedule::Plan (the same plan the SimGrid twin replays) on CPU
// ranks. Each rank is a host thread that issues its RankPlan in order onto a compute stream and a
// comm stream (worker threads); the nodes of one microbatch form one event chain across both
// streams, so different microbatches overlap only across streams (reference sections 3.5, 5.2).
//
// Node boundaries detach tensors: each slot reads and writes per-(layer, microbatch) state, and a
// tensor parked by one node for a later one (the residual of a MoE layer, the shared-expert
// output, the routing with its combine weights) receives the gradient of every consumer before
// its producer's backward runs, once, with the merged gradient.
//
// Weight gradients: every backward computes its parameter gradients into a per-(layer,
// microbatch) staging buffer; the slot's weight-gradient step adds the staging buffer into the
// parameter gradient. Without delayed wgrad that step directly follows the backward; with it, it
// runs in the plan's W node. Both orders therefore produce the same bits.
//
// Scope today: PP = 1, DP = EP (every rank holds num_experts / EP experts), no MTP depths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/engine/runtime/link_model.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::engine::exec {

struct ExecutorOptions {
  runtime::LinkModel link;  // throttle of the in-process transport; off by default
  // Test-only fault injection: the parked residual of MoE layers drops the gradient that the
  // combine node sends it, so merged gradients are incomplete. Equivalence tests must catch it.
  bool test_drop_residual_grad = false;
};

struct StepResult {
  // loss[rank][microbatch]: the main-head loss contribution of that microbatch, already
  // weighted by 1 / (tokens of the whole step over all ranks), plus its router losses.
  std::vector<std::vector<double>> loss;
  double total = 0;  // sum over ranks and microbatches
  traces::Timeline timeline;
};

// Schedule dims that describe `cfg` for a batch of (micro_batch, seq_len) sequences, so
// build_plan produces a plan whose costs match the engine's model.
schedule::ModelDims schedule_dims(const ModelConfig& cfg, int micro_batch, int seq_len);

class Executor {
 public:
  // Throws EngineError when the plan does not fit the pattern (layers, ranks) or asks for what
  // the executor does not run yet (PP > 1, DP != EP, MTP).
  Executor(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed,
           schedule::Plan plan, ExecutorOptions options = {});
  ~Executor();
  Executor(Executor&&) noexcept;
  Executor& operator=(Executor&&) noexcept;

  // One step: every rank runs every microbatch forward and backward in plan order, then the
  // non-expert gradients are all-reduced over the DP group. batches[rank][microbatch].
  // Gradients accumulate into the ranks' parameters (call zero_grad() between steps).
  StepResult step(const std::vector<std::vector<Batch>>& batches);
  void zero_grad();

  // AdamW on every rank over the parameters it owns (non-expert parameters and its experts).
  // The clipping norm is the one global norm of the whole model: non-expert gradients once
  // (identical on all ranks after the all-reduce) plus every rank's own experts, summed in a
  // fixed order, so every rank applies the same factor. Returns that norm.
  double optimizer_step(const AdamWConfig& cfg);
  std::int64_t optimizer_steps() const;

  // Checkpoint of the whole model and the optimizer, keyed by canonical (pattern-independent)
  // names, each expert taken from its owner: one safetensors file, written atomically. A run
  // of the flattened pattern (or another schedule or EP size with the same experts) resumes it.
  void save(const std::string& path) const;
  // Throws EngineError(BadCheckpoint) when a parameter is missing, extra or mis-shaped; nothing
  // is changed then.
  void load(const std::string& path);

  int ranks() const;
  const schedule::Plan& plan() const;
  // Parameters of one rank in HybridModel::parameters() order (canonical names equal the
  // HybridModel's). Expert parameters of experts this rank does not own keep zero gradients.
  std::vector<ParamRef<float>> parameters(int rank);
  // Whether parameter `canonical` of `rank` is an expert this rank owns (or a non-expert).
  bool owns(int rank, const std::string& canonical) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::engine::exec
