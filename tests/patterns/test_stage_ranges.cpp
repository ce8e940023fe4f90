// Out-of-range stage and offset arguments: each is a PatternError with the right rule, never an
// index into the segments (the fuzzer once found select_stage reading segments[-1]).
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::error_of;

namespace {

PipelineConfig pipes(int pp, std::optional<int> vpp = std::nullopt) {
  PipelineConfig c;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

}  // namespace

TEST_CASE("logical_offset_of a negative physical offset is out of range, not a group cut", "[patterns][pipeline][known-bug]") {
  const ParsedPattern p = parse("[*-][*E]M");
  CHECK(rule_code(error_of([&] { (void)logical_offset_of(p, -1); }).rule()) != "G4");
}

TEST_CASE("a negative pp rank or virtual stage is rejected, never used as an index", "[patterns][pipeline][known-bug]") {
  const ParsedPattern p = parse("M*|M-");
  (void)error_of([&] { (void)select_stage(p, pipes(1, 2), 0, -1); });
  (void)error_of([&] { (void)select_stage(p, pipes(2), -1, std::nullopt); });
  (void)error_of([&] { (void)select_stage(parse("*EEE"), pipes(1), 0, -1); });
}

TEST_CASE("virtual stages beyond the segments of a pipe-less pattern on pp 1 are out of range (R8)", "[patterns][pipeline][known-bug][R8]") {
  const ParsedPattern p = parse("M*");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(1, 3), 0, 1); }).rule()) == "R8");
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, pipes(1, 3)); }).rule()) == "R8");
}
