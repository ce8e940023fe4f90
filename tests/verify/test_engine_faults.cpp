// Mutation checks the engine properties must pass: with the executor's test-only faults
// (ExecutorOptions::test_drop_residual_grad: the parked residual loses the gradient the combine
// node sends it; test_drop_mtp_grad: a parked MTP hidden state loses the gradient of the depth
// that read it; test_weight_fault: a W node of delayed wgrad runs twice, never, or before its
// backward) the engine equivalence properties fail and shrink to a replayable case.
#include <catch2/catch.hpp>

#include "ht/verify/engine_checks.hpp"
#include "ht/verify/runner.hpp"

using namespace ht::verify;

namespace {

// A registry property with its check re-pointed at a broken executor.
Property with_fault(const std::string& name, void (*check)(const Case&, const ht::engine::exec::ExecutorOptions&),
                    bool drop_mtp = false) {
  Property p = *find_property(name);
  p.check = [check, drop_mtp](const Case& c) {
    ht::engine::exec::ExecutorOptions broken;
    (drop_mtp ? broken.test_drop_mtp_grad : broken.test_drop_residual_grad) = true;
    check(c, broken);
  };
  return p;
}

}  // namespace

TEST_CASE("a W node run twice, skipped, or run before its backward makes engine.delay_wgrad fail", "[verify]") {
  using ht::engine::exec::WeightFault;
  const std::pair<WeightFault, std::string> faults[] = {{WeightFault::RunTwice, "ran twice"},
                                                        {WeightFault::Skip, "never ran"},
                                                        {WeightFault::BeforeBackward, "ran before its backward"}};
  for (const auto& [fault, message] : faults) {
    INFO(message);
    Property p = *find_property("engine.delay_wgrad");
    p.check = [fault = fault](const Case& c) {
      ht::engine::exec::ExecutorOptions broken;
      broken.test_weight_fault = fault;
      check_engine_delay_wgrad(c, broken);
    };
    RunOptions o;
    o.seed = 9;
    o.cases = 10;
    const RunResult r = run_property(p, o);
    CHECK(r.outcome == Outcome::Fail);
    REQUIRE(r.counterexample.has_value());
    CHECK_THAT(r.note, Catch::Contains(message));
    CHECK_FALSE(replay(*r.counterexample).has_value());  // the registered property passes the same case
  }
}

TEST_CASE("a dropped residual gradient makes engine.matches_model fail", "[verify]") {
  RunOptions o;
  o.seed = 5;
  o.cases = 30;
  const RunResult r = run_property(with_fault("engine.matches_model", check_engine_matches_model), o);
  CHECK(r.outcome == Outcome::Fail);
  REQUIRE(r.counterexample.has_value());
  CHECK_THAT(r.note, Catch::Contains("differs from the HybridModel"));
  // The shrunk case fails again with the fault and passes without it.
  CHECK_THROWS_AS(with_fault("engine.matches_model", check_engine_matches_model).check(r.counterexample->input), Falsified);
  CHECK_FALSE(replay(*r.counterexample).has_value());
}

TEST_CASE("a dropped residual gradient makes engine.overlap_vs_sequential fail", "[verify]") {
  RunOptions o;
  o.seed = 6;
  o.cases = 30;
  const RunResult r = run_property(with_fault("engine.overlap_vs_sequential", check_engine_overlap_vs_sequential), o);
  CHECK(r.outcome == Outcome::Fail);
  REQUIRE(r.counterexample.has_value());
  CHECK_FALSE(replay(*r.counterexample).has_value());
}

TEST_CASE("a dropped MTP hidden-state gradient makes engine.matches_model fail", "[verify]") {
  RunOptions o;
  o.seed = 7;
  o.cases = 40;
  const auto broken = with_fault("engine.matches_model", check_engine_matches_model, true);
  const RunResult r = run_property(broken, o);
  CHECK(r.outcome == Outcome::Fail);
  REQUIRE(r.counterexample.has_value());
  CHECK_THAT(r.note, Catch::Contains("differs from the HybridModel"));
  // Only MTP patterns carry the fault: the shrunk case keeps a depth.
  CHECK_THAT(r.counterexample->input.at("pattern").get<std::string>(), Catch::Contains("/"));
  CHECK_THROWS_AS(broken.check(r.counterexample->input), Falsified);
  CHECK_FALSE(replay(*r.counterexample).has_value());
}
