// The engine equivalence checks behind the engine.* properties, callable with explicit executor
// options for the run under test, so a test can inject a fault (test_drop_residual_grad) and
// demand that the property catches it. The reference run always uses default options.
#pragma once

#include "ht/engine/exec/executor.hpp"
#include "ht/verify/property.hpp"

namespace ht::verify {

// Executor (EP = 1, one microbatch, sequential plan) against the HybridModel: loss and every
// gradient bitwise equal.
void check_engine_matches_model(const Case& c, const engine::exec::ExecutorOptions& under_test);
// Combined 1F1B (EP >= 2) against the sequential plan: losses and gradients bitwise equal, and
// non-expert gradients identical on every rank after the all-reduce.
void check_engine_overlap_vs_sequential(const Case& c, const engine::exec::ExecutorOptions& under_test);
// Combined 1F1B with delayed wgrad (the run under test) against the same plan without: losses and
// gradients bitwise equal.
void check_engine_delay_wgrad(const Case& c, const engine::exec::ExecutorOptions& under_test);

}  // namespace ht::verify
