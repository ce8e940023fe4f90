// The registry: stable names, every property passes on a small fixed-seed budget (the oracles
// agree with the code as it is), a fixed pattern is honoured or the property says why it skips.
#include <catch2/catch.hpp>

#include <set>

#include "ht/verify/property.hpp"
#include "ht/verify/runner.hpp"

using namespace ht::verify;

namespace {

int budget(const Property& p) {
  if (p.group == "pattern") return 300;
  if (p.group == "plan") return 40;
  return p.name == "engine.router" ? 200 : 4;  // twin replays and executor steps cost milliseconds
}

}  // namespace

TEST_CASE("the registry has the documented stable names, each once", "[verify]") {
  std::set<std::string> names;
  for (const auto& p : properties()) {
    CHECK(names.insert(p.name).second);
    CHECK(p.name.rfind(p.group + ".", 0) == 0);
    CHECK_FALSE(p.summary.empty());
  }
  for (const char* n : {"pattern.roundtrip", "pattern.rule.R1", "pattern.rule.R3", "pattern.rule.R8", "pattern.rule.G4",
                        "pattern.rule.G5", "pattern.logical_keys", "plan.every_node_once", "plan.13_step_order",
                        "plan.microbatch_chain", "plan.ep_lockstep"})
    CHECK(names.count(n) == 1);
#ifdef HT_TEST_HAS_ENGINE
  for (const char* n : {"engine.grouped_vs_flattened", "engine.overlap_vs_sequential", "engine.delay_wgrad",
                        "engine.checkpoint_resume", "engine.matches_model", "engine.router",
                        "engine.device_grouped_vs_flattened", "engine.device_matches_model"})
    CHECK(names.count(n) == 1);
#endif
  CHECK(find_property("pattern.rule.G5") != nullptr);
  CHECK(find_property("no.such.property") == nullptr);
}

TEST_CASE("every registered property passes a fixed-seed budget", "[verify][property]") {
  for (const auto& p : properties()) {
    CAPTURE(p.name);
    RunOptions o;
    o.seed = 7;
    o.cases = budget(p);
    const RunResult r = run_property(p, o);
    INFO(r.note);
    CHECK(r.outcome == Outcome::Pass);
    CHECK(r.cases == o.cases);
    CHECK_FALSE(r.counterexample.has_value());
  }
}

TEST_CASE("with a fixed pattern every property passes or says why it does not apply", "[verify][property]") {
  for (const char* text : {"[M*E][*E]", "M*|-E"}) {
    for (const auto& p : properties()) {
      CAPTURE(text, p.name);
      RunOptions o;
      o.seed = 3;
      o.cases = std::min(budget(p), 20);
      o.context.pattern = text;
      const RunResult r = run_property(p, o);
      INFO(r.note);
      CHECK(r.outcome != Outcome::Fail);
      if (r.outcome == Outcome::Skip) CHECK_FALSE(r.note.empty());
    }
  }
  // The 13-step oracle is for one pipeline stage: a piped pattern is skipped with the reason.
  RunOptions o;
  o.context.pattern = "[*E]|[*E]";
  const RunResult r = run_property(*find_property("plan.13_step_order"), o);
  CHECK(r.outcome == Outcome::Skip);
  CHECK_THAT(r.note, Catch::Contains("pipe"));
}

#ifdef HT_TEST_HAS_ENGINE
TEST_CASE("a fixed MTP pattern runs in the engine properties whose schedules take MTP, the others say why not", "[verify][property]") {
  for (const char* name : {"engine.matches_model", "engine.grouped_vs_flattened", "engine.ep_invariance",
                           "engine.checkpoint_load", "engine.checkpoint_resume", "engine.device_grouped_vs_flattened",
                           "engine.device_matches_model", "engine.overlap_vs_sequential",
                           "engine.delay_wgrad", "engine.pp_invariance"}) {
    CAPTURE(name);
    RunOptions o;
    o.seed = 11;
    o.cases = 6;
    o.context.pattern = "[M*E]-/ME/ME";
    const RunResult r = run_property(*find_property(name), o);
    INFO(r.note);
    const std::string n = name;
    if (n == "engine.overlap_vs_sequential" || n == "engine.delay_wgrad" || n == "engine.pp_invariance") {
      CHECK(r.outcome == Outcome::Skip);
      CHECK_THAT(r.note, Catch::Contains("MTP"));
    } else {
      CHECK(r.outcome == Outcome::Pass);
      CHECK(r.cases == o.cases);
    }
  }
}
#endif

TEST_CASE("a time budget runs batches until the time is spent", "[verify]") {
  RunOptions o;
  o.seconds = 0.3;
  const RunResult r = run_property(*find_property("pattern.roundtrip"), o);
  CHECK(r.outcome == Outcome::Pass);
  CHECK(r.seconds >= 0.3);
  CHECK(r.cases > 10);
}
