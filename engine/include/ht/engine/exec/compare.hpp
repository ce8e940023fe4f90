// What runs of the executor are compared with, shared by the verifier's properties
// (verify/src/engine_compare.cpp) and `hybrid-twin verify` (cli/src/cmd_verify.cpp, which is
// built without rapidcheck): reproducible token batches, the EP = DP plan of a pattern, and the
// difference of the owned parameters (values or gradients) of two executors.
#pragma once

#include <cstdint>
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

// The plan of `p` on EP = DP ranks for (batch, seq) microbatches.
schedule::Plan ep_plan(const patterns::ParsedPattern& p, const ModelConfig& cfg, int batch, int seq, int ep,
                       int microbatches, bool overlap, bool delay_wgrad);

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
OwnedDiff compare_owned(Executor& a, Executor& b, bool grads);

}  // namespace ht::engine::exec
