// Equivalence oracles over executors: runs of one case under two schedules, groupings or EP sizes
// must give the same losses and gradients, bit for bit (memcmp of float32 buffers), or within
// the stated reassociation bound where the association legitimately differs (EP invariance).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/verify/engine_gen.hpp"

namespace ht::verify::detail {

// Token batches [rank][microbatch] drawn from the case's data seed.
std::vector<std::vector<engine::Batch>> batches_for(const gen::EngineCase& c, int ranks, int microbatches,
                                                    std::uint64_t salt = 0);
schedule::Plan plan_for(const patterns::ParsedPattern& p, const gen::EngineCase& c, int ep, int microbatches,
                        bool overlap, bool delay_wgrad);

// Every gradient (or value) of every rank, keyed "r<rank>:<canonical>".
std::map<std::string, engine::Tensor<float>> tensors_of(engine::exec::Executor& ex, bool grads);
// Names whose bits differ or that exist on one side only; empty when equal.
std::vector<std::string> differing(const std::map<std::string, engine::Tensor<float>>& a,
                                   const std::map<std::string, engine::Tensor<float>>& b);
// Fails (Falsified) naming the first differing loss or tensor.
void expect_same_losses(const engine::exec::StepResult& a, const engine::exec::StepResult& b, const std::string& what);
void expect_same_tensors(engine::exec::Executor& a, engine::exec::Executor& b, bool grads, const std::string& what);

// Owned parameters of `a` against the owner of the same canonical name in `b` (EP sizes may
// differ): engine::exec::compare_owned, and a missing name fails.
engine::exec::OwnedDiff compare_owned(engine::exec::Executor& a, engine::exec::Executor& b, bool grads);

}  // namespace ht::verify::detail
