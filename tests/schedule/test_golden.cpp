// Plans without tensor/context parallelism are the plans of the builder before those existed
// (golden/README.md): same nodes, dependencies, costs, transfers, collectives and issue orders,
// bit for bit. Only the kernel lists (Node::work, Plan::works) are new.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "ht/schedule/plan_json.hpp"

namespace ht::schedule {
namespace {

struct Golden {
  const char* file;
  const char* pattern;
  ParallelConfig config;
  ScheduleOptions options;
  ModelDims dims;
};

ModelDims tiny_with_shared_expert() {
  ModelDims d = tiny_model();
  d.shared_expert_ffn = 32;
  return d;
}

ScheduleOptions skewed() {
  ScheduleOptions o = test::options(true, true);
  o.routing_skew = 0.7;
  return o;
}

}  // namespace

TEST_CASE("plans with tp = cp = 1 keep the pre-TP builder's bits", "[golden]") {
  using test::options;
  using test::parallel;
  const std::vector<Golden> cases = {
      {"combined.json", "[M*E][*E]", parallel(2, 2, 4), options(true, true), tiny_model()},
      {"sequential_expert_ar.json", "[M*E][*E]", parallel(2, 4, 2), options(false, false), tiny_model()},
      {"interleaved.json", "[M*E]|[*E]|[*E]|-", parallel(2, 2, 4, 2, 2), options(true, true), tiny_model()},
      {"pipeline_legacy_split.json", "M*-G-*", parallel(1, 1, 4, 2), options(false, false), tiny_model()},
      {"skewed_shared.json", "[*E]-E", parallel(4, 4, 3), skewed(), tiny_with_shared_expert()},
      {"mtp.json", "[M*E]E/*E", parallel(2, 2, 2), options(false, false), tiny_model()},
      {"default_dims.json", "M[*E]M[*E]-", parallel(4, 4, 2), options(true, true), ModelDims{}},
      {"mla_window.json", "+EW-", parallel(2, 2, 2), options(false, false), tiny_model()},
  };
  for (const Golden& g : cases) {
    INFO(g.file);
    const Plan old = load_plan(std::string(HT_GOLDEN_DIR) + "/" + g.file);
    Plan now = build_plan(patterns::parse(g.pattern), g.dims, g.config, g.options);
    CHECK(!now.works.empty());
    now.works.clear();
    for (Node& n : now.nodes) n.work = -1;
    REQUIRE(now.nodes.size() == old.nodes.size());
    for (std::size_t i = 0; i < now.nodes.size(); ++i) {
      INFO("node " << i << " " << old.nodes[i].label());
      REQUIRE(now.nodes[i] == old.nodes[i]);
    }
    CHECK(now.collectives == old.collectives);
    CHECK(now.ranks == old.ranks);
    CHECK(now == old);
  }
}

}  // namespace ht::schedule
