// The EP-overlap executor: runs a schedule::Plan (the same plan the SimGrid twin replays) on CPU
// ranks. Each rank is a host thread that issues its RankPlan in order onto a compute stream and a
// comm stream (worker threads); the nodes of one microbatch form one event chain across both
// streams, so different microbatches overlap only across streams (reference sections 3.5, 5.2).
//
// Node boundaries detach tensors: each slot reads and writes per-(layer, microbatch) state, and a
// tensor parked by one node for a later one (the residual of a MoE layer, the shared-expert
// output, the routing with its combine weights, the MTP hidden states) receives the gradient of
// every consumer before its producer's backward runs, once, with the merged gradient.
//
// MTP depths (reference sections 3.2, 3.4) run as one layer plan each after the decoder layers
// of the last chunk: the first depth's pre_dispatch applies the final norm and parks h_final for
// the main head and its own hnorm; each depth's mtp_post parks its final-normed output for its
// head (post_process, with the shared output layer) and the next depth. Hybrid MTP never runs
// overlapped (rule O3).
//
// Weight gradients: parameter gradients are computed into a per-(layer, microbatch) staging
// buffer, which the slot's weight-gradient step adds into the parameter gradient. Without delayed
// wgrad the backward computes them all and that step follows it at once. With delayed wgrad the
// backward computes the input gradients and the recurrence-born parameter gradients (norm weights,
// conv, dt_bias, A_log, D, the router) and saves the operands of every linear map's weight GEMM;
// the plan's W node runs those GEMMs into the same buffers and then adds them (weight_steps.hpp).
// The same calls on the same values in the same order: both produce the same bits.
//
// Pipeline parallelism: global rank = pp_rank * dp + dp_rank (the plan's numbering). A rank holds
// only its stage's layers (all its model chunks with VPP), plus the embedding on stage 0 and the
// final norm and output layer on the last stage; activations go forward and gradients backward
// point to point on the comm stream, and non-expert gradients are all-reduced within each
// stage's DP group. Per layer, gradients accumulate over the same microbatches in the same order
// as with PP = 1, so PP = k (with or without VPP, sequential or interleaved 1F1B) equals PP = 1
// bit for bit: loss, gradients, and parameters after optimizer steps.
//
// Scope today: EP divides DP (each group of EP consecutive DP ranks holds the experts once, and
// their DP / EP copies sum their gradients over the EDP group); MTP depths with PP = 1 only
// (with PP > 1 the last stage would need its own copy of the embedding).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/exec/weight_steps.hpp"
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
  bool comm_realtime = true;  // runtime::CpuWorldOptions::comm_realtime
  // Test-only fault injection: the parked residual of MoE layers drops the gradient that the
  // combine node sends it, so merged gradients are incomplete. Equivalence tests must catch it.
  bool test_drop_residual_grad = false;
  // Test-only: a parked MTP hidden state (h_final, or a depth's output) drops the gradient of
  // the depth that read it, keeping only its head's.
  bool test_drop_mtp_grad = false;
  // Test-only: each rank's first W node runs twice, never, or before its backward
  // (weight_steps.hpp). The step must fail naming the node.
  WeightFault test_weight_fault = WeightFault::None;
};

struct StepResult {
  // loss[dp_rank][microbatch]: the main-head loss contribution of that microbatch, already
  // weighted by 1 / (tokens of the whole step over all ranks), plus its router losses (of every
  // pipeline stage, in layer order), plus its MTP depths' losses (each weighted by
  // mtp_loss_scaling / depths / (valid positions of the whole step)). With PP = 1, dp_rank = rank.
  std::vector<std::vector<double>> loss;
  double total = 0;  // sum over ranks and microbatches
  double lm = 0;     // the main head's part of total (no router or MTP losses)
  traces::Timeline timeline;
};

// Checks one step's batches, batches[rank][microbatch]: `ranks` x `microbatches` of them, tokens
// and targets both (B, T) with ids in [0, vocab). Returns the step's token count; throws
// EngineError(BadInput) with `who` ("executor", "device executor") in the message.
double check_step_batches(const std::vector<std::vector<Batch>>& batches, int ranks, int microbatches, int vocab,
                          const std::string& who);
// The cross-entropy weight of a valid position of MTP depth d (one with a token d + 1 ahead), for
// each depth: mtp_loss_scaling / depths / (the step's valid positions), in HybridModel's float
// arithmetic, so one rank with one microbatch gives its bits and any split of the same global batch
// the same weight. Both executors weigh their depths' heads with it.
std::vector<float> mtp_weights(const std::vector<std::vector<Batch>>& batches, int depths, float scaling);

// Schedule dims that describe `cfg` for a batch of (micro_batch, seq_len) sequences, so
// build_plan produces a plan whose costs match the engine's model.
schedule::ModelDims schedule_dims(const ModelConfig& cfg, int micro_batch, int seq_len);

class Executor {
 public:
  // Throws EngineError when the plan does not fit the pattern (layers, ranks, stages), overlaps
  // hybrid MTP (rule O3) or asks for what the executor does not run yet (DP != EP, MTP with
  // PP > 1).
  Executor(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed,
           schedule::Plan plan, ExecutorOptions options = {});
  ~Executor();
  Executor(Executor&&) noexcept;
  Executor& operator=(Executor&&) noexcept;

  // One step: every rank runs every microbatch forward and backward in plan order, then the
  // non-expert gradients are all-reduced over the DP group of each stage.
  // batches[dp_rank][microbatch] (data_ranks() lists; stage 0 reads the tokens, the last stage
  // the targets).
  // Gradients accumulate into the ranks' parameters (call zero_grad() between steps).
  StepResult step(const std::vector<std::vector<Batch>>& batches);
  void zero_grad();

  // AdamW on every rank over the parameters it owns (its stage's non-expert parameters and its
  // experts). The clipping norm is the one global norm of the whole model: non-expert gradients
  // once (identical on all DP ranks after the all-reduce) plus every rank's own experts, summed
  // in a fixed order (DP rank by DP rank, each in the model's parameter order across stages), so
  // every rank applies the same factor and PP = k sums exactly as PP = 1. Returns that norm.
  double optimizer_step(const AdamWConfig& cfg);
  std::int64_t optimizer_steps() const;
  // Rank r's AdamW state (moments by canonical name, of the parameters it owns), and setting it.
  AdamWState<float> optimizer_state(int rank) const;
  void set_optimizer_state(int rank, AdamWState<float> state);

  // Checkpoint of the whole model and the optimizer, keyed by canonical (pattern-independent)
  // names, each expert taken from its owner: one safetensors file, written atomically. A run
  // of the flattened pattern (or another schedule or EP size with the same experts) resumes it.
  void save(const std::string& path) const;
  // Throws EngineError(BadCheckpoint) when a parameter is missing, extra or mis-shaped; nothing
  // is changed then.
  void load(const std::string& path);

  int ranks() const;       // global ranks: pp x dp
  int data_ranks() const;  // DP ranks per stage: the batch lists step() takes
  int pipeline_stage(int rank) const;
  const schedule::Plan& plan() const;
  // Parameters one rank holds, in HybridModel::parameters() order (canonical names equal the
  // HybridModel's): the embedding on stage 0, its stage's layers, the final norm and output
  // layer on the last stage. Expert parameters of experts this rank does not own keep zero
  // gradients.
  std::vector<ParamRef<float>> parameters(int rank);
  // Whether `rank` holds parameter `canonical` and, for an expert, owns that expert.
  bool owns(int rank, const std::string& canonical) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ht::engine::exec
