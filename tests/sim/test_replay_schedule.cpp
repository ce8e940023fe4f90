// The twin on plans from the real schedule builder: overlap against sequential on generated
// small configurations, the replay's summary against the traces module's independent overlap
// analytics, and byte-identical Chrome traces for identical inputs.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/sim/replay.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/overlap.hpp"
#include "plan_fixtures.hpp"

using namespace ht::sim;
namespace hs = ht::schedule;

namespace {

struct Config {
  std::string pattern;
  hs::ParallelConfig parallel;
};

rc::Gen<Config> small_configs() {
  return rc::gen::exec([] {
    Config c;
    c.pattern = *rc::gen::element<std::string>("[*E][ME]", "[*E][*E][ME]", "M[*E]-[ME]", "[ME][ME][*E][*E]");
    c.parallel.ep = *rc::gen::element(2, 4);
    c.parallel.dp = c.parallel.ep * *rc::gen::inRange(1, 3);
    c.parallel.microbatches = *rc::gen::inRange(1, 5);
    return c;
  });
}

hs::Plan plan_of(const Config& c, bool overlap, bool delay_wgrad) {
  hs::ScheduleOptions o;
  o.overlap = overlap;
  o.delay_wgrad = delay_wgrad;
  return hs::build_plan(ht::patterns::parse(c.pattern), hs::tiny_model(), c.parallel, o);
}

// H100 sheet with the tiny model: compute and all-to-all of comparable size.
PlatformSpec platform_for(const hs::Plan& plan) {
  auto p = preset("dgx-h100");
  p.gpus_per_node = 4;
  return sized_for(p, static_cast<int>(plan.ranks.size()));
}

}  // namespace

TEST_CASE("built plans without interference: combined 1F1B is never slower than sequential",
          "[sim][property][schedule]") {
  // Same nodes on both sides (no delayed wgrad: splitting W out adds launches and roofline
  // maxima, a real cost the property is not about) and no launch overhead.
  rc::prop("overlap <= sequential on build_plan output", [] {
    const Config c = *small_configs();
    const auto seq = plan_of(c, false, false), ovl = plan_of(c, true, false);
    CostModel costs;
    costs.launch_overhead_s = 0;
    const double s = replay(seq, platform_for(seq), costs).summary.step_time_s;
    const double o = replay(ovl, platform_for(ovl), costs).summary.step_time_s;
    RC_TAG(o < s ? "faster" : "equal");
    RC_ASSERT(o <= s * (1 + 1e-9));
  });
}

TEST_CASE("the replay's summary agrees with the traces module's overlap analytics", "[sim][schedule]") {
  // Toy plans carry all-to-all as their only comm, so traces' comm exposure is the a2a exposure.
  for (bool overlap : {false, true}) {
    auto plan = ht::sim::test::toy_layer(6, 1e-3, 4e8, overlap, 4);
    auto r = replay(plan, ht::sim::test::exact_platform(2, 2), ht::sim::test::exact_costs());
    const auto o = ht::traces::summarize(r.timeline);
    const double g = r.summary.gpus;
    CHECK(r.summary.compute_busy_s == Approx(o.compute_busy_s / g).epsilon(1e-12));
    CHECK(r.summary.a2a_total_s == Approx(o.comm_busy_s / g).epsilon(1e-12));
    CHECK(r.summary.a2a_exposed_s == Approx(o.comm_exposed_s / g).epsilon(1e-12).margin(1e-15));
    CHECK(r.summary.a2a_hidden_fraction == Approx(o.hidden_fraction).epsilon(1e-9));
    CHECK(r.summary.step_time_s == Approx(o.span_s).epsilon(1e-12));
  }
}

TEST_CASE("a built plan replays to byte-identical Chrome traces", "[sim][schedule]") {
  Config c{"[*E][ME]|[*E][ME]", {}};
  c.parallel.ep = 2;
  c.parallel.dp = 4;
  c.parallel.pp = 2;
  c.parallel.vpp = 1;  // overlap with PP needs the interleaved schedule (O7)
  c.parallel.microbatches = 4;
  const auto plan = plan_of(c, true, true);
  const auto a = replay(plan, platform_for(plan), CostModel{});
  const auto b = replay(plan, platform_for(plan), CostModel{});
  CHECK(a.summary.step_time_s > 0);
  CHECK(ht::traces::to_chrome_trace_json(a.timeline) == ht::traces::to_chrome_trace_json(b.timeline));
}
