// What runs of the executor are compared with, shared by the verifier's properties
// (verify/src/engine_compare.cpp) and `hybrid-twin verify` (cli/src/cmd_verify.cpp, which is
// built without rapidcheck): reproducible token batches, the EP = DP plan of a pattern, and the
// difference of the owned parameters (values or gradients) of two executors.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ht/engine/exec/executor.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::engine::exec {

// batches[rank][microbatch] of (batch, seq) token and target ids in [0, vocab), each drawn from
// its own stream keyed by (seed, rank, microbatch).
std::vector<std::vector<Batch>> random_batches(int ranks, int microbatches, int batch, int seq, int vocab,
                                               std::uint64_t seed);

// The plan of `p` on DP ranks (EP of them, or `dp` when given) for (batch, seq) microbatches.
schedule::Plan ep_plan(const patterns::ParsedPattern& p, const ModelConfig& cfg, int batch, int seq, int ep,
                       int microbatches, bool overlap, bool delay_wgrad, int dp = 0);

// Owned parameters of `a` against the owner of the same canonical name in `b` (EP sizes may
// differ): max |a - b|, max |b|, whether every byte is equal, the first differing name; a name
// without an owner in b, or of another shape, sets `missing` (and max_abs = inf).
struct OwnedDiff {
  double max_abs = 0;
  double max_ref = 0;
  bool bitwise = true;
  std::string first_differing;
  std::string missing;
};
// What compare_owned reads of a run: its ranks, the parameters each holds (values and gradients
// on the host), and whether a rank owns a name. The CPU executor and the device executor
// (engine/cuda/device_executor.hpp) both give one. For checkpoints, also rank r's AdamW state
// (host copies of its moments) and `restore`: rank r takes the values its parameters() tensors
// now hold, and the state's moments and step.
struct Owned {
  int ranks = 0;
  std::function<std::vector<ParamRef<float>>(int)> parameters;
  std::function<bool(int, const std::string&)> owns;
  std::function<AdamWState<float>(int)> optimizer_state;
  std::function<void(int, const AdamWState<float>&)> restore;
};
Owned owned(Executor& e);
OwnedDiff compare_owned(const Owned& a, const Owned& b, bool grads);

// A run's whole model into `model` (the same pattern and config): each canonical parameter from
// its first owner in rank order (replicas hold equal copies), with that owner's moments into
// `state` (and its step count) when given. What `train` writes as a checkpoint.
void gather_model(const Owned& run, HybridModel<float>& model, AdamWState<float>* state);
// And back: every rank takes `model`'s values of the parameters it owns, and `state`'s moments and
// step (none: zero moments at step 0). Throws EngineError(BadCheckpoint) naming a parameter the
// model lacks or holds in another shape, before any rank changes.
void scatter_model(const Owned& run, HybridModel<float>& model, const AdamWState<float>* state);
inline OwnedDiff compare_owned(Executor& a, Executor& b, bool grads) { return compare_owned(owned(a), owned(b), grads); }

}  // namespace ht::engine::exec
