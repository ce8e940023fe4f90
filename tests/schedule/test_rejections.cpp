// Every rejection of reference section 4 the schedule owns (O1, O2, O3, O7, O8, O10), the
// delayed-wgrad refusal of a layer type that cannot defer its weight gradients, and the range
// checks, each with the one setting that triggers it; the message names the values.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/plan_size.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

// The error code and message of building the plan, or nullopt when it builds.
std::optional<std::pair<ErrorCode, std::string>> rejection(const std::string& pattern,
                                                           const ParallelConfig& c,
                                                           const ScheduleOptions& o,
                                                           const ModelDims& d = tiny_model()) {
  try {
    make_plan(pattern, c, o, d);
  } catch (const ScheduleError& e) {
    return std::make_pair(e.code(), std::string(e.what()));
  }
  return std::nullopt;
}

void require_rejected(const std::string& pattern, const ParallelConfig& c, const ScheduleOptions& o,
                      ErrorCode code, const std::string& fragment, const ModelDims& d = tiny_model()) {
  const auto r = rejection(pattern, c, o, d);
  REQUIRE(r.has_value());
  CHECK(r->first == code);
  CHECK_THAT(r->second, Catch::Contains(fragment));
  CHECK(r->second.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("O1: the overlap rejects an MLP/MoE that is not last in its group", "[schedule][reject]") {
  require_rejected("[-*]", parallel(2, 2, 1), options(true, false), ErrorCode::O1_OverlapLayerShape,
                   "[-*]");
  // Without overlap the same group is one unit in pre_dispatch.
  CHECK_FALSE(rejection("[-*]", parallel(2, 2, 1), options(false, false)).has_value());
}

TEST_CASE("O1: the overlap rejects pre-layers it cannot split", "[schedule][reject]") {
  require_rejected("[ME][WE]", parallel(2, 2, 1), options(true, false),
                   ErrorCode::O1_OverlapLayerShape, "'W'");
  require_rejected("C", parallel(2, 2, 1), options(true, false), ErrorCode::O1_OverlapLayerShape,
                   "'C'");
  require_rejected("[MH-]", parallel(2, 2, 1), options(true, false),
                   ErrorCode::O1_OverlapLayerShape, "logical layer 0");
  // M, *, G, D and + are fine.
  CHECK_FALSE(rejection("[M*E][G-]", parallel(2, 2, 1), options(true, false)).has_value());
  CHECK_FALSE(rejection("[MDE][+E]", parallel(2, 2, 1), options(true, false)).has_value());
}

TEST_CASE("O2: overlap with CUDA graphs", "[schedule][reject]") {
  ScheduleOptions o = options(true, false);
  o.cuda_graphs = true;
  require_rejected("[*E]", parallel(2, 2, 1), o, ErrorCode::O2_OverlapCudaGraphs, "cuda graphs");
  // Megatron rejects the combination on the HybridModel, grouped or not.
  require_rejected("*E", parallel(2, 2, 1), o, ErrorCode::O2_OverlapCudaGraphs, "for any pattern");
  o.overlap = false;
  CHECK_FALSE(rejection("[*E]", parallel(2, 2, 1), o).has_value());
}

TEST_CASE("O3: overlap with an MTP pattern", "[schedule][reject]") {
  require_rejected("[*E]/*E", parallel(2, 2, 1), options(true, false),
                   ErrorCode::O3_OverlapHybridMtp, "'/*E'");
  CHECK_FALSE(rejection("[*E]/*E", parallel(2, 2, 1), options(false, false)).has_value());
}

TEST_CASE("O7: overlap prerequisites", "[schedule][reject]") {
  require_rejected("[*E]", parallel(1, 2, 1), options(true, false), ErrorCode::O7_OverlapConfig,
                   "ep = 1");
  require_rejected("[*E]|[*E]", parallel(2, 2, 2, 2, 0), options(true, false),
                   ErrorCode::O7_OverlapConfig, "pp = 2");
  require_rejected("[*E]", parallel(2, 2, 1), options(false, false, true),
                   ErrorCode::O7_OverlapConfig, "early attention");
  // The 7-27 code schedules MTP but allows at most one depth.
  ScheduleOptions o = options(true, false);
  o.reject_hybrid_mtp = false;
  require_rejected("[*E]/*E/*E", parallel(2, 2, 1), o, ErrorCode::O7_OverlapConfig, "has 2");
  CHECK_FALSE(rejection("[*E]/*E", parallel(2, 2, 1), o).has_value());
}

TEST_CASE("O8: the MTP inner layer must be MoE under overlap", "[schedule][reject]") {
  ScheduleOptions o = options(true, false);
  o.reject_hybrid_mtp = false;
  require_rejected("[*E]/*-", parallel(2, 2, 1), o, ErrorCode::O8_MtpInnerNotMoe, "'*-'");
}

TEST_CASE("O10: delayed weight gradients need overlap", "[schedule][reject]") {
  require_rejected("[*E]", parallel(2, 2, 1), options(false, true),
                   ErrorCode::O10_DelayWgradNeedsOverlap, "delay_wgrad");
}

TEST_CASE("delayed wgrad refuses a layer type that cannot defer its weight gradients", "[schedule][reject]") {
  // The symbol table says which types have a weight-gradient step to delay (defers_wgrad): 'W',
  // 'C' and 'H' have none in the overlap scheduler's wgrad map. The refusal names the type and
  // the layer, and comes before O1 so that the reason is the weight gradients.
  require_rejected("[ME][WE]", parallel(2, 2, 1), options(true, true), ErrorCode::DelayWgradLayer,
                   "'W' (window_attention) in logical layer 1");
  require_rejected("MC-", parallel(2, 2, 1), options(true, true), ErrorCode::DelayWgradLayer, "'C' (csa)");
  require_rejected("[ME][WE]", parallel(2, 2, 1), options(true, false), ErrorCode::O1_OverlapLayerShape, "'W'");
  // Every type of the map builds with delayed wgrad.
  CHECK_FALSE(rejection("[M*E][G-]", parallel(2, 2, 1), options(true, true)).has_value());
  CHECK_FALSE(rejection("[MDE][+E]", parallel(2, 2, 1), options(true, true)).has_value());
}

TEST_CASE("bad sizes are rejected with their values", "[schedule][reject]") {
  require_rejected("[*E]", parallel(2, 3, 1), options(false, false), ErrorCode::BadConfig,
                   "ep x etp = 2 must divide tp x cp x dp = 3");
  require_rejected("[*E]|[*E]|[*E]|[*E]", parallel(2, 2, 3, 2, 2), options(true, false),
                   ErrorCode::BadConfig, "microbatches = 3");
  require_rejected("[*E]", parallel(3, 3, 1), options(false, false), ErrorCode::BadConfig,
                   "num_experts = 8");
  require_rejected("[*E]", parallel(1, 1, 0), options(false, false), ErrorCode::BadConfig,
                   "microbatches = 0");
  require_rejected("[*E]", parallel(1, 1, 1, 1, 2), options(false, false), ErrorCode::BadConfig,
                   "vpp = 2");
  ScheduleOptions skew = options(false, false);
  skew.routing_skew = -1;
  require_rejected("[*E]", parallel(1, 1, 1), skew, ErrorCode::BadConfig, "routing_skew");
  ScheduleOptions load = options(false, false);
  load.expert_load = 0.9;
  require_rejected("[*E]", parallel(1, 1, 1), load, ErrorCode::BadConfig, "expert_load = 0.9");
  load.expert_load = 1.2;
  load.routing_skew = 0.5;
  require_rejected("[*E]", parallel(1, 1, 1), load, ErrorCode::BadConfig, "give one");
  ScheduleOptions node = options(false, false);
  node.expert_node_load = 0.5;
  require_rejected("[*E]", parallel(1, 1, 1), node, ErrorCode::BadConfig, "expert_node_load = 0.5");
  node.expert_node_load = 1.1;
  require_rejected("[*E]", parallel(1, 1, 1), node, ErrorCode::BadConfig, "expert_node_load needs expert_load");
  node.expert_node_load = 1.3;
  node.expert_load = 1.2;
  require_rejected("[*E]", parallel(1, 1, 1), node, ErrorCode::BadConfig, "never above the busiest");
  ModelDims d = tiny_model();
  d.top_k = 9;
  require_rejected("[*E]", parallel(1, 1, 1), options(false, false), ErrorCode::BadModel,
                   "top_k = 9", d);
}

TEST_CASE("pipe segments that pp x vpp does not cover are rejected", "[schedule][reject]") {
  // 4 segments on 2 ranks without virtual stages would drop half the model: either the pattern
  // library (R8) or the builder refuses it.
  CHECK_THROWS(make_plan("[*E]|[*E]|[*E]|[*E]", parallel(1, 1, 2, 2, 0), options(false, false)));
}

TEST_CASE("more pipe segments than pp x vpp stages asks for --vpp instead of failing inside", "[schedule][reject]") {
  ParallelConfig c;
  c.pp = 2;
  c.microbatches = 4;
  require_rejected("[M*E]|-|[*E]|G", c, {}, ErrorCode::BadConfig, "pass --vpp 2");
  c.vpp = 2;
  CHECK_FALSE(rejection("[M*E]|-|[*E]|G", c, {}).has_value());
  c.vpp = 4;
  require_rejected("[M*E]|-|[*E]|G", c, {}, ErrorCode::BadConfig, "4 pipe segments but pp = 2 x vpp = 4");
}

TEST_CASE("plans too large to build are refused before building, with the limit", "[schedule][rejections]") {
  // Closed form of the estimate: ranks x microbatches x (15 per layer on a rank + 8).
  const auto p = ht::patterns::parse("M*E");
  ParallelConfig c;
  c.microbatches = 1000;
  CHECK(estimate_plan_size(p, c).nodes == 1000.0 * (3 * 15 + 8));
  c.dp = c.ep = 4;
  CHECK(estimate_plan_size(p, c).transfers == 4.0 * 1000 * 1 * 4 * 3);
  c = ParallelConfig{};
  c.microbatches = 100000000;
  CHECK_THROWS_WITH(build_plan(p, tiny_model(), c, {}), Catch::Contains("more than the limit of 4000000"));
  c = ParallelConfig{};
  c.dp = c.ep = 65536;
  CHECK_THROWS_WITH(build_plan(p, tiny_model(), c, {}), Catch::Contains("peer transfers"));
  c = ParallelConfig{};
  c.dp = 1 << 21;
  CHECK_THROWS_WITH(build_plan(p, tiny_model(), c, {}), Catch::Contains("ranks of one plan"));
}
