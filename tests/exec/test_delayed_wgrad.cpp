// Delayed weight gradients on the CPU executor: the W nodes run the weight-gradient GEMMs (read
// from the measured timeline's GEMM counters, against the twin's price of each W node and the
// same step without delayed wgrad), the result stays bitwise that of the fused backward, and the
// three ways a walk can get W nodes wrong -- run twice, never, before the backward -- fail the
// step with the node's name.
#include <catch2/catch.hpp>

#include <string>

#include "ht/engine/cuda/device_checks.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/patterns/pattern.hpp"
#include "wgrad_work.hpp"

namespace {

using namespace ht;
using engine::ModelConfig;
using engine::exec::Executor;
using engine::exec::WeightFault;

// Every mixer's dims and a shared expert, whose W is pre_dispatch's (reference 3.3).
ModelConfig model() { return engine::cuda::model_check_config(); }

constexpr int kBatch = 2, kSeq = 6, kEp = 2, kMicrobatches = 2;

schedule::Plan plan(const patterns::ParsedPattern& p, bool delay) {
  return engine::exec::ep_plan(p, model(), kBatch, kSeq, kEp, kMicrobatches, true, delay);
}

}  // namespace

TEST_CASE("delayed wgrad: the W nodes run the weight-gradient GEMMs the twin prices them at, moved out of the "
          "backward, and the bits are those of the fused backward",
          "[exec][wgrad]") {
  const auto p = patterns::parse("M[*E]M[*E]-");
  const auto batches = engine::exec::random_batches(kEp, kMicrobatches, kBatch, kSeq, model().vocab_size, 7);
  Executor on(p, model(), 3, plan(p, true)), off(p, model(), 3, plan(p, false));
  const auto ron = on.step(batches), roff = off.step(batches);
  CHECK(ron.loss == roff.loss);
  const auto d = engine::exec::compare_owned(on, off, true);
  CHECK(d.bitwise);
  CHECK(d.max_ref > 0);
  const auto work = test::check_weight_work(on.plan(), ron.timeline, off.plan(), roff.timeline,
                                            engine::exec::schedule_dims(model(), kBatch, kSeq),
                                            model().num_experts / kEp);
  // Here the weight GEMMs are about half of the backward's GEMM work (as 2x forward suggests).
  INFO("backward " << work.backward << ", W " << work.weight);
  CHECK(work.weight > 0.3 * (work.backward + work.weight));
}

TEST_CASE("delayed wgrad: a W node run twice, never, or before its backward fails the step naming it",
          "[exec][wgrad]") {
  const auto p = patterns::parse("[*E]M-");
  const auto batches = engine::exec::random_batches(kEp, kMicrobatches, kBatch, kSeq, model().vocab_size, 8);
  const std::pair<WeightFault, std::string> faults[] = {{WeightFault::RunTwice, "ran twice"},
                                                        {WeightFault::Skip, "never ran"},
                                                        {WeightFault::BeforeBackward, "ran before its backward"}};
  for (const auto& [fault, message] : faults) {
    INFO(message);
    engine::exec::ExecutorOptions o;
    o.test_weight_fault = fault;
    Executor broken(p, model(), 3, plan(p, true), o);
    CHECK_THROWS_WITH(broken.step(batches), Catch::Contains(message) && Catch::Contains("W node"));
  }
  // Without a W node in the plan the switches change nothing.
  engine::exec::ExecutorOptions o;
  o.test_weight_fault = WeightFault::Skip;
  Executor fused(p, model(), 3, plan(p, false), o), ref(p, model(), 3, plan(p, false));
  CHECK(fused.step(batches).loss == ref.step(batches).loss);
}
