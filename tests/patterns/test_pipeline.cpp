// Specification tests for pipeline allocation (reference sections 1.3, 2.3 and 4: R5-R8, G4):
// pipe segments map VPP-major onto (pp rank, virtual stage); pipe-less patterns use the legacy
// split in physical units, which may not cut a group. Expected values are the reference's
// worked test cases.
#include "pattern_test_support.hpp"

using namespace ht::patterns;
using ht::patterns::test::check_rejection;
using ht::patterns::test::error_of;
using ht::patterns::test::items_of;

namespace {

PipelineConfig pipes(int pp, std::optional<int> vpp = std::nullopt) {
  PipelineConfig c;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

PipelineConfig legacy(int pp, std::optional<int> first, std::optional<int> last) {
  PipelineConfig c;
  c.pp = pp;
  c.first_stage_layers = first;
  c.last_stage_layers = last;
  return c;
}

}  // namespace

TEST_CASE("'M-M-|M-M*-' at virtual stage 1 is M - M * - at physical offset 4", "[patterns][pipeline]") {
  const StageSlice s = select_stage(parse("M-M-|M-M*-"), pipes(1, 2), 0, 1);
  CHECK(s.items == items_of({"M", "-", "M", "*", "-"}));
  CHECK(s.physical_offset == 4);
  CHECK(s.logical_offset == 4);
  CHECK(s.physical_count() == 5);
}

TEST_CASE("'MM|M*|M-|ME' at virtual stages 0..3 starts at offsets 0, 2, 4, 6", "[patterns][pipeline]") {
  const ParsedPattern p = parse("MM|M*|M-|ME");
  const int expected[] = {0, 2, 4, 6};
  for (int vp = 0; vp < 4; ++vp) {
    INFO("vp stage " << vp);
    CHECK(select_stage(p, pipes(1, 4), 0, vp).physical_offset == expected[vp]);
  }
  CHECK(select_stage(p, pipes(1, 4), 0, 3).items == items_of({"M", "E"}));
}

TEST_CASE("'||M*' gives an empty stage at vp 0 and M * at offset 0 at vp 2", "[patterns][pipeline]") {
  const ParsedPattern p = parse("||M*");
  const StageSlice first = select_stage(p, pipes(1, 3), 0, 0);
  CHECK(first.items.empty());
  CHECK(first.physical_offset == 0);
  const StageSlice last = select_stage(p, pipes(1, 3), 0, 2);
  CHECK(last.items == items_of({"M", "*"}));
  CHECK(last.physical_offset == 0);
}

TEST_CASE("'MMM|M|MMMMM' starts its three stages at offsets 0, 3, 4", "[patterns][pipeline]") {
  const auto stages = allocate_stages(parse("MMM|M|MMMMM"), pipes(1, 3));
  REQUIRE(stages.size() == 3);
  CHECK(stages[0].physical_offset == 0);
  CHECK(stages[1].physical_offset == 3);
  CHECK(stages[2].physical_offset == 4);
  CHECK(stages[2].physical_count() == 5);
}

TEST_CASE("segment k belongs to pp rank k % pp and virtual stage k / pp", "[patterns][pipeline]") {
  const ParsedPattern p = parse("M|MM|MMM|MMMM|MMMMM|MMMMMM");
  const auto stages = allocate_stages(p, pipes(3, 2));
  REQUIRE(stages.size() == 6);
  for (int k = 0; k < 6; ++k) {
    INFO("segment " << k);
    CHECK(stages[k].pp_rank == k % 3);
    CHECK(stages[k].vp_stage == k / 3);
    CHECK(stages[k].physical_count() == k + 1);       // segment k has k + 1 layers
    CHECK(stages[k].physical_offset == k * (k + 1) / 2);
    const StageSlice direct = select_stage(p, pipes(3, 2), k % 3, k / 3);
    CHECK(direct.items == stages[k].items);
  }
}

TEST_CASE("as many segments as pp ranks need no virtual pipeline", "[patterns][pipeline]") {
  const ParsedPattern p = parse("|M*");
  const StageSlice rank0 = select_stage(p, pipes(2), 0, std::nullopt);
  const StageSlice rank1 = select_stage(p, pipes(2), 1, std::nullopt);
  CHECK(rank0.items.empty());  // empty segments are legal (pipeline balancing)
  CHECK(rank1.items == items_of({"M", "*"}));
  CHECK(rank1.physical_offset == 0);
}

TEST_CASE("legacy 'M*M*M*M*' on pp 4 with first=1 and last=1 has sizes 1,3,3,1 at 0,1,4,7", "[patterns][pipeline]") {
  const ParsedPattern p = parse("M*M*M*M*");
  const int sizes[] = {1, 3, 3, 1};
  const int offsets[] = {0, 1, 4, 7};
  for (int r = 0; r < 4; ++r) {
    INFO("pp rank " << r);
    const StageSlice s = select_stage(p, legacy(4, 1, 1), r, std::nullopt);
    CHECK(s.physical_count() == sizes[r]);
    CHECK(s.physical_offset == offsets[r]);
  }
  CHECK(select_stage(p, legacy(4, 1, 1), 1, std::nullopt).items == items_of({"*", "M", "*"}));
}

TEST_CASE("legacy 'M*M*M*' on pp 4 with first=3 starts its stages at 0, 3, 4, 5", "[patterns][pipeline]") {
  const auto stages = allocate_stages(parse("M*M*M*"), legacy(4, 3, std::nullopt));
  REQUIRE(stages.size() == 4);
  const int offsets[] = {0, 3, 4, 5};
  for (int r = 0; r < 4; ++r) {
    INFO("pp rank " << r);
    CHECK(stages[r].pp_rank == r);
    CHECK(stages[r].physical_offset == offsets[r]);
  }
}

TEST_CASE("legacy even split gives every rank N/pp layers at rank * N/pp", "[patterns][pipeline]") {
  const auto stages = allocate_stages(parse("M*-M*-"), pipes(3));
  REQUIRE(stages.size() == 3);
  CHECK(stages[0].items == items_of({"M", "*"}));
  CHECK(stages[1].items == items_of({"-", "M"}));
  CHECK(stages[2].items == items_of({"*", "-"}));
  CHECK(stages[2].physical_offset == 4);
}

TEST_CASE("legacy 'M*M*M*M*M' on pp 4 with first=2 is R7: middle layers do not divide", "[patterns][pipeline][R7]") {
  const PatternError e =
      error_of([] { (void)select_stage(parse("M*M*M*M*M"), legacy(4, 2, std::nullopt), 1, std::nullopt); });
  CHECK(rule_code(e.rule()) == "R7");
  CHECK_THAT(std::string(e.what()), Catch::Contains("middle layers", Catch::CaseSensitive::No));
}

TEST_CASE("legacy even split of N layers over pp ranks with N % pp != 0 is R7", "[patterns][pipeline][R7]") {
  const PatternError e = error_of([] { (void)allocate_stages(parse("M*M"), pipes(2)); });
  check_rejection(e, {"R7", -1});
}

TEST_CASE("pipes together with first or last stage layer counts are R5", "[patterns][pipeline][R5]") {
  const ParsedPattern p = parse("M*|M*");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, legacy(2, 1, std::nullopt), 0, std::nullopt); }).rule()) == "R5");
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, legacy(2, std::nullopt, 1)); }).rule()) == "R5");
}

TEST_CASE("a virtual stage on a pipe-less pattern with pp > 1 is R6", "[patterns][pipeline][R6]") {
  const ParsedPattern p = parse("M*M*");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(2, 2), 0, 0); }).rule()) == "R6");
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, pipes(2, 2)); }).rule()) == "R6");
}

TEST_CASE("a segment count that pp does not divide is R8", "[patterns][pipeline][R8]") {
  const ParsedPattern p = parse("M|M|M");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(2), 0, std::nullopt); }).rule()) == "R8");
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, pipes(2)); }).rule()) == "R8");
}

TEST_CASE("a segment index past the last segment is R8", "[patterns][pipeline][R8]") {
  const ParsedPattern p = parse("M|M");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(1, 3), 0, 2); }).rule()) == "R8");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(2, 2), 1, 1); }).rule()) == "R8");
}

TEST_CASE("a pipeline size below 1 is a bad argument, not a crash", "[patterns][pipeline]") {
  CHECK(rule_code(error_of([] { (void)allocate_stages(parse("M*"), pipes(0)); }).rule()) ==
        rule_code(Rule::BadArgument));
}

TEST_CASE("'[M*E]|M-' at virtual stage 1 is M - at physical offset 3 and logical offset 1", "[patterns][pipeline][groups]") {
  const StageSlice s = select_stage(parse("[M*E]|M-"), pipes(1, 2), 0, 1);
  CHECK(s.items == items_of({"M", "-"}));
  CHECK(s.physical_offset == 3);
  CHECK(s.logical_offset == 1);
}

TEST_CASE("'[*-][*-]|[*E][*E]' at virtual stage 1 is two [*E] groups at physical 4, logical 2", "[patterns][pipeline][groups]") {
  const StageSlice s = select_stage(parse("[*-][*-]|[*E][*E]"), pipes(1, 2), 0, 1);
  CHECK(s.items == items_of({"[*E]", "[*E]"}));
  CHECK(s.physical_offset == 4);
  CHECK(s.logical_offset == 2);
}

TEST_CASE("the legacy split in physical units may end on a group boundary", "[patterns][pipeline][groups]") {
  const auto stages = allocate_stages(parse("[*-][*E]"), pipes(2));
  REQUIRE(stages.size() == 2);
  CHECK(stages[0].items == items_of({"[*-]"}));
  CHECK(stages[1].items == items_of({"[*E]"}));
  CHECK(stages[1].physical_offset == 2);
  CHECK(stages[1].logical_offset == 1);
}

TEST_CASE("a legacy split that cuts a group is G4", "[patterns][pipeline][G4]") {
  const ParsedPattern p = parse("[*-][*E]");
  CHECK(rule_code(error_of([&] { (void)allocate_stages(p, pipes(4)); }).rule()) == "G4");
  CHECK(rule_code(error_of([&] { (void)select_stage(p, pipes(4), 1, std::nullopt); }).rule()) == "G4");
  CHECK(rule_code(error_of([] { (void)allocate_stages(parse("M[M*]-"), legacy(2, 2, std::nullopt)); }).rule()) == "G4");
}

TEST_CASE("logical_offset_of counts the items before a physical offset on an item boundary", "[patterns][pipeline][groups]") {
  const ParsedPattern p = parse("[*-][*E]M");
  CHECK(logical_offset_of(p, 0) == 0);
  CHECK(logical_offset_of(p, 2) == 1);
  CHECK(logical_offset_of(p, 4) == 2);
  CHECK(logical_offset_of(p, 5) == 3);  // the end of the pattern
}

TEST_CASE("logical_offset_of a physical offset inside a group is G4", "[patterns][pipeline][G4]") {
  const ParsedPattern p = parse("[*-][*E]M");
  CHECK(rule_code(error_of([&] { (void)logical_offset_of(p, 1); }).rule()) == "G4");
  CHECK(rule_code(error_of([&] { (void)logical_offset_of(p, 3); }).rule()) == "G4");
}

TEST_CASE("logical_offset_of a physical offset past the end is out of range, not a group cut", "[patterns][pipeline]") {
  const ParsedPattern p = parse("[*-][*E]M");
  CHECK(rule_code(error_of([&] { (void)logical_offset_of(p, 6); }).rule()) != "G4");
}

TEST_CASE("a virtual pipeline size that disagrees with the segment count is R8", "[patterns][pipeline][R8]") {
  CHECK(rule_code(error_of([] { (void)allocate_stages(parse("M|M|M|M"), pipes(2, 3)); }).rule()) == "R8");
}
