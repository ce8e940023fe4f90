// Failures shrink to a minimal case that is written to a file and replayed exactly: a planted
// property that is false for patterns of 3 or more physical layers must come back with a pattern
// of exactly 3, the file must round-trip, and replaying a registry property on a stored case must
// give the same verdict as checking that case directly.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "ht/patterns/pattern.hpp"
#include "ht/verify/case_schema.hpp"
#include "ht/verify/pattern_gen.hpp"
#include "ht/verify/property.hpp"
#include "ht/verify/runner.hpp"

using namespace ht::verify;

namespace {

Property planted_short_patterns() {
  Property p;
  p.name = "test.short_patterns";
  p.group = "test";
  p.summary = "planted: every valid pattern has fewer than 3 physical layers";
  p.cases = [](const FuzzContext&) -> CaseSource {
    return {rc::gen::map(gen::valid_pattern(), [](const gen::PatternModel& m) { return Case{{"pattern", m.text()}}; }), ""};
  };
  p.check = [](const Case& c) {
    const auto parsed = ht::patterns::parse(c.at("pattern").get<std::string>());
    if (parsed.physical_count() >= 3) fail(std::to_string(parsed.physical_count()) + " physical layers");
  };
  return p;
}

}  // namespace

TEST_CASE("a failure is shrunk to a minimal case that names the property and seed", "[verify]") {
  RunOptions o;
  o.seed = 11;
  o.cases = 200;
  const RunResult r = run_property(planted_short_patterns(), o);
  REQUIRE(r.outcome == Outcome::Fail);
  REQUIRE(r.counterexample.has_value());
  const Counterexample& ce = *r.counterexample;
  CHECK(ce.property == "test.short_patterns");
  CHECK(ce.message == "3 physical layers");
  CHECK(r.note == ce.message);
  // Shrinking removes every layer it can: exactly 3 physical layers remain.
  CHECK(ht::patterns::parse(ce.input.at("pattern").get<std::string>()).physical_count() == 3);
  // The same seed finds the same counterexample.
  const RunResult again = run_property(planted_short_patterns(), o);
  REQUIRE(again.counterexample.has_value());
  CHECK(again.counterexample->input == ce.input);
  CHECK(again.counterexample->seed == ce.seed);
}

TEST_CASE("a counterexample file round-trips and is validated on read", "[verify]") {
  const auto dir = std::filesystem::temp_directory_path() / "ht_verify_replay_test";
  std::filesystem::create_directories(dir);
  const Counterexample ce{"pattern.rule.G5", 42, Case{{"pattern", "[M*]"}, {"code", "G5"}, {"position", 2}}, "why"};
  write_counterexample(dir / "ce.json", ce);
  const Counterexample back = read_counterexample(dir / "ce.json");
  CHECK(back.property == ce.property);
  CHECK(back.seed == ce.seed);
  CHECK(back.input == ce.input);
  CHECK(back.message == ce.message);
  std::ofstream(dir / "bad.json") << R"({"format": "something-else", "property": "x"})";
  CHECK_THROWS_WITH(read_counterexample(dir / "bad.json"), Catch::Contains("not a counterexample file"));
  std::ofstream(dir / "broken.json") << "{";
  CHECK_THROWS_WITH(read_counterexample(dir / "broken.json"), Catch::Contains("not valid JSON"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("replay gives the verdict of checking the stored case directly", "[verify]") {
  // "[M*]" does not break G5, so the G5 property fails on it; "[MM]" does (caret on the second M).
  const Counterexample wrong{"pattern.rule.G5", 1, Case{{"pattern", "[M*]"}, {"code", "G5"}, {"position", 2}}, ""};
  const auto failure = replay(wrong);
  REQUIRE(failure.has_value());
  CHECK_THAT(*failure, Catch::Contains("accepted a pattern that breaks G5"));
  const Counterexample right{"pattern.rule.G5", 1, Case{{"pattern", "[MM]"}, {"code", "G5"}, {"position", 2}}, ""};
  CHECK_FALSE(replay(right).has_value());
  CHECK_THROWS_AS(replay(Counterexample{"no.such", 1, Case::object(), ""}), std::invalid_argument);
}

TEST_CASE("a replayed case outside the generators' domain is bad input, not a failure", "[verify]") {
  // What case_schema.hpp refuses: fields whose sizes disagree, unknown or mistyped fields, values
  // past the bounds; a field the check needs but the case lacks surfaces as BadCase from replay.
  const Case router{{"tokens", 12}, {"experts", 8}, {"topk", 3}, {"hidden", 4}, {"loss_scale", 1.0},
                    {"x", std::vector<int>{1, 2}}, {"router", std::vector<int>{1}}};
  CHECK_THROWS_WITH(validate_case(router), Catch::Contains("'x' must hold tokens x hidden values"));
  Case topk = router;
  topk["topk"] = 9;
  CHECK_THROWS_WITH(validate_case(topk), Catch::Contains("'topk' = 9 exceeds 'experts' = 8"));
  CHECK_THROWS_WITH(validate_case(Case{{"patern", "M"}}), Catch::Contains("unknown field 'patern'"));
  CHECK_THROWS_WITH(validate_case(Case{{"pattern", 5}}), Catch::Contains("'pattern' = 5 must be a string"));
  CHECK_THROWS_WITH(validate_case(Case{{"ep", 3}, {"dp", 4}}), Catch::Contains("must be a multiple of 'ep'"));
  CHECK_THROWS_AS(validate_case(Case{{"model", Case{{"hidden", 100000}}}}), BadCase);
  CHECK_NOTHROW(validate_case(Case{{"pattern", "M[*E]"}, {"code", "G5"}, {"position", 2}}));
  CHECK_THROWS_AS(replay(Counterexample{"pattern.roundtrip", 1, Case::object(), ""}), BadCase);
}
