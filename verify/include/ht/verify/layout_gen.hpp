// rapidcheck generators of Megatron layouts on top of a plan case (plan_gen.hpp): tensor and
// context parallelism (tp 1, 2 or 4, cp 1 or 2), expert tensor parallelism,
// Megatron's gradient sync with or without the distributed optimizer and its overlaps, or
// Megatron-FSDP (without delayed weight gradients), and
// recomputation within Megatron's rules (full and `moe` only without the EP overlap).
#pragma once

#include <rapidcheck.h>

#include <string>

#include "ht/schedule/config.hpp"
#include "ht/verify/plan_gen.hpp"

namespace ht::verify::gen {

inline rc::Gen<PlanCase> layout_case() {
  return rc::gen::exec([] {
    PlanCase c = *plan_case();
    schedule::ParallelConfig& p = c.config;
    p.cp = *rc::gen::element(1, 2);
    // tp 4 exceeds the tiny models' two KV heads (one KV group per rank, megatron-parallel.md
    // 2.3); not with 'M' (its two B/C groups must divide tp) nor with 'G' under CP (its four
    // heads must divide tp x cp).
    const bool tp4 = c.pattern.find('M') == std::string::npos && (p.cp == 1 || c.pattern.find('G') == std::string::npos);
    p.tp = tp4 ? *rc::gen::element(1, 2, 2, 4) : *rc::gen::element(1, 2);
    // ep divides dp already; etp 2 when ep x 2 still divides tp x cp x dp.
    if (p.stage_ranks() % (p.ep * 2) == 0 && *rc::gen::arbitrary<bool>()) p.etp = 2;
    if (*rc::gen::arbitrary<bool>()) {
      p.optimizer.sync = schedule::GradSync::Megatron;
      p.optimizer.distributed = *rc::gen::arbitrary<bool>();
      p.optimizer.overlap_grad_reduce = *rc::gen::arbitrary<bool>();
      p.optimizer.overlap_param_gather =
          p.optimizer.distributed && p.optimizer.overlap_grad_reduce && *rc::gen::arbitrary<bool>();
      p.optimizer.bucket_elements = *rc::gen::element(0.0, 5000.0, 20000.0);
      // Megatron-FSDP a third of the time (not with delayed weight gradients, as the builder says).
      if (!c.options.delay_wgrad && *rc::gen::inRange(0, 3) == 0) {
        p.optimizer.fsdp = true;
        p.optimizer.distributed = p.optimizer.overlap_grad_reduce = p.optimizer.overlap_param_gather = false;
      }
    }
    const int recompute = *rc::gen::inRange(0, 4);
    if (recompute == 1 && !c.options.overlap) {
      p.recompute.full = true;
      // Megatron's block method (the first N layers of each model chunk) or its uniform method
      // with units of N layers, a third of the time each.
      const int method = *rc::gen::inRange(0, 3);
      if (method == 1) p.recompute.block_layers = *rc::gen::inRange(0, 4);
      if (method == 2) p.recompute.uniform_layers = *rc::gen::inRange(2, 5);
    }
    if (recompute == 2) p.recompute.modules = *rc::gen::inRange(1, 128) & ~unsigned(schedule::kRecomputeMoe);
    if (recompute == 3 && !c.options.overlap) p.recompute.modules = *rc::gen::inRange(1, 128);
    return c;
  });
}

}  // namespace ht::verify::gen
