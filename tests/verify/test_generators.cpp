// The verifier's generators produce what they claim: every single-rule violation is rejected by
// the parser (or the pipeline allocation) with exactly the rule its generator names, valid
// patterns parse, plan cases build, and engine cases use only what the CPU executor runs.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "ht/patterns/error.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/symbols.hpp"
#include "ht/schedule/build.hpp"
#include "ht/verify/pattern_gen.hpp"
#include "ht/verify/pipeline_gen.hpp"
#include "ht/verify/plan_gen.hpp"

namespace pg = ht::verify::gen;
using ht::patterns::PatternError;

namespace {

// The rule code parse() reports, or "" when it accepts.
std::string parse_rule(const std::string& text) {
  try {
    (void)ht::patterns::parse(text);
  } catch (const PatternError& e) {
    return std::string(ht::patterns::rule_code(e.rule()));
  }
  return "";
}

std::string allocation_rule(const pg::PipelineViolation& v) {
  const auto p = ht::patterns::parse(v.text);
  try {
    if (v.pp_rank)
      (void)ht::patterns::select_stage(p, v.config, *v.pp_rank, v.vp_stage);
    else
      (void)ht::patterns::allocate_stages(p, v.config);
  } catch (const PatternError& e) {
    return std::string(ht::patterns::rule_code(e.rule()));
  }
  return "";
}

}  // namespace

TEST_CASE("each parse-violation generator yields texts rejected with exactly its own rule", "[verify][property]") {
  const std::vector<std::pair<std::string, rc::Gen<pg::Violation>>> gens{
      {"R1", pg::r1_violation()}, {"R2", pg::r2_violation()}, {"R3", pg::r3_violation()}, {"R4", pg::r4_violation()},
      {"G1", pg::g1_violation()}, {"G2", pg::g2_violation()}, {"G3", pg::g3_violation()}, {"G5", pg::g5_violation()}};
  for (const auto& [code, g] : gens) {
    CAPTURE(code);
    CHECK(rc::check(code, [&] {
      const pg::Violation v = *g;
      RC_ASSERT(v.code == code);
      RC_ASSERT(parse_rule(v.text) == code);
    }));
  }
}

TEST_CASE("each pipeline-violation generator yields layouts rejected with exactly its own rule", "[verify][property]") {
  const std::vector<std::pair<std::string, rc::Gen<pg::PipelineViolation>>> gens{
      {"R5", pg::r5_violation()}, {"R6", pg::r6_violation()}, {"R7", pg::r7_violation()},
      {"R8", pg::r8_violation()}, {"G4", pg::g4_violation()}};
  for (const auto& [code, g] : gens) {
    CAPTURE(code);
    CHECK(rc::check(code, [&] {
      const pg::PipelineViolation v = *g;
      RC_ASSERT(v.code == code);
      RC_ASSERT(parse_rule(v.text) == "");  // the pattern itself is valid
      RC_ASSERT(allocation_rule(v) == code);
    }));
  }
}

TEST_CASE("a user's pattern becomes a model that prints back to the same text", "[verify]") {
  for (const char* text : {"M[*E]-|[G-]E/M*/M*", "[M*E][*E]", "/ME", "D[+E]|W"}) {
    CAPTURE(text);
    CHECK(pg::model_of(ht::patterns::parse(text)).text() == ht::patterns::to_string(ht::patterns::parse(text)));
  }
  CHECK(pg::model_of(ht::patterns::parse("D[+E]")).world == "mla");
  CHECK(pg::model_of(ht::patterns::parse("M*")).world == "plain");
}

TEST_CASE("violations built on a fixed pattern break exactly their rule", "[verify][property]") {
  const auto base = rc::gen::just(pg::model_of(ht::patterns::parse("[M*E]-|G[GE]")));
  rc::prop("G5 and G1 on a fixed base", [&] {
    const pg::Violation g5 = *pg::g5_violation(base);
    RC_ASSERT(parse_rule(g5.text) == "G5");
    const pg::Violation g1 = *pg::g1_violation(base);
    RC_ASSERT(parse_rule(g1.text) == "G1");
  });
}

TEST_CASE("generated plan cases are accepted by build_plan", "[verify][property]") {
  rc::prop("plan_case and combined_1f1b_case build", [] {
    for (const auto& c : {*pg::plan_case(), *pg::combined_1f1b_case()}) {
      RC_LOG() << c.pattern << "\n";
      (void)ht::schedule::build_plan(ht::patterns::parse(c.pattern), ht::schedule::tiny_model(), c.config, c.options);
    }
  });
}

TEST_CASE("a fixed pattern gets only configurations its structure allows", "[verify][property]") {
  rc::prop("plan_case_for", [] {
    const std::string text = *rc::gen::element<std::string>("[M*E][*E]", "M*|-E", "[*E]|[*E]|M|-", "[-*]E");
    const auto p = ht::patterns::parse(text);
    const pg::PlanCase c = *pg::plan_case_for(p);
    RC_ASSERT(c.pattern == text);
    RC_ASSERT(std::max(1, p.segment_count()) % c.config.pp == 0);
    if (text == "[-*]E") RC_ASSERT(!c.options.overlap);  // rule O1: '-' not last
    (void)ht::schedule::build_plan(p, ht::schedule::tiny_model(), c.config, c.options);
  });
}
