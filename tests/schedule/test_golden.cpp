// Plans without tensor/context parallelism are the plans of the builder before those existed
// (golden/README.md): same nodes, dependencies, transfers, collectives and issue orders, bit for
// bit. New since: the kernel lists (Node::work, Plan::works), and in the compute nodes' FLOPs and
// bytes the layers' own norms, residual adds and RoPE (issue 32), checked here against their
// closed form.
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "ht/schedule/plan_json.hpp"

#include <string_view>

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
    double added = 0;  // forward FLOPs the norms, residual adds and RoPE add, over every rank
    for (std::size_t i = 0; i < now.nodes.size(); ++i) {
      INFO("node " << i << " " << old.nodes[i].label());
      if (now.nodes[i].phase == Phase::Forward && now.nodes[i].stream == Stream::Compute)
        added += now.nodes[i].flops - old.nodes[i].flops;
      Node masked = now.nodes[i];
      masked.flops = old.nodes[i].flops;
      masked.mem_bytes = old.nodes[i].mem_bytes;
      REQUIRE(masked == old.nodes[i]);
    }
    // Per microbatch and rank: 5 T h for every physical layer but E (RMSNorm 4, residual add 1),
    // T h for an E layer's residual add, 3 T (q + k) for RoPE on '*' and 'W'; T = tokens.
    const ModelDims& d = g.dims;
    const double t = d.tokens(), h = d.hidden;
    const double rope = 3 * t * (double(d.num_heads) + d.num_kv_heads) * d.head_dim * d.rotary_percent / 100.0;
    const auto parsed = patterns::parse(g.pattern);
    double per_microbatch = 0;
    for (const char c : std::string_view(g.pattern)) {
      if (c == '/') break;  // MTP depths: counted below
      if (c == 'E') per_microbatch += t * h;
      else if (std::string_view("*W+DCHMG-").find(c) != std::string_view::npos) per_microbatch += 5 * t * h;
      if (c == '*' || c == 'W') per_microbatch += rope;
    }
    const auto slash = std::string_view(g.pattern).find('/');
    if (slash != std::string_view::npos)
      for (const char c : std::string_view(g.pattern).substr(slash + 1)) {
        if (c == 'E') per_microbatch += parsed.mtp_depths * t * h;
        else if (std::string_view("*W+DCHMG-").find(c) != std::string_view::npos) per_microbatch += parsed.mtp_depths * 5 * t * h;
        if (c == '*' || c == 'W') per_microbatch += parsed.mtp_depths * rope;
      }
    const double replicas = double(g.config.dp) * g.config.microbatches;  // every dp rank runs every microbatch
    CHECK(added == Approx(replicas * per_microbatch).epsilon(1e-12));
    CHECK(now.collectives == old.collectives);
    CHECK(now.ranks == old.ranks);
  }
}

}  // namespace ht::schedule
