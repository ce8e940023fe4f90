// Twin properties (reference sections 3.5 and 5.2, sim/replay.hpp): the SimGrid replay of a
// generated plan runs each stream one node at a time, its summary equals the figures recomputed
// here from the timeline's own spans (step time, compute busy, bubble, all-to-all totals), no
// step beats its busiest stream, exposed and hidden all-to-all equal their recomputation from the
// spans, the replay starts exactly the plan's flows and the forward dispatches' routing counts,
// and a replay is a pure function of its inputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "ht/schedule/build.hpp"
#include "ht/sim/platform.hpp"
#include "ht/verify/platform_gen.hpp"
#include "ht/sim/replay.hpp"
#include "plan_case.hpp"
#include "property_groups.hpp"

namespace ht::verify::detail {
namespace {

struct TwinInput {
  schedule::Plan plan;
  sim::PlatformSpec platform;
  sim::CostModel costs;
};

TwinInput twin_input(const Case& c) {
  const PlanInput in = input_of(c);
  TwinInput t{schedule::build_plan(in.pattern, in.dims, in.config, in.options),
              sim::parse_platform(c.at("platform").get<std::string>()), {}};
  t.costs.interference_factor = c.at("interference").get<double>();
  return t;
}

sim::SimResult run(const TwinInput& t) { return sim::replay(t.plan, t.platform, t.costs); }

// SimGrid rounds event times to about 1e-9 s; allow that per node on a path.
double slack(const schedule::Plan& p) { return 1e-9 * static_cast<double>(p.nodes.size() + 1); }

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

// Reference 5.2 item 2: at most one node per stream at a time, in issue order.
void check_stream_serialised(const Case& c) {
  const TwinInput t = twin_input(c);
  const auto r = run(t);
  std::map<std::pair<int, int>, std::vector<const traces::Span*>> by_stream;
  for (const auto& s : r.timeline.spans) by_stream[{s.device, s.stream}].push_back(&s);
  const double eps = slack(t.plan);
  for (auto& [key, spans] : by_stream) {
    std::stable_sort(spans.begin(), spans.end(), [](auto* a, auto* b) { return a->start_s < b->start_s; });
    for (std::size_t i = 1; i < spans.size(); ++i)
      if (spans[i]->start_s < spans[i - 1]->end_s() - eps)
        fail("GPU " + std::to_string(key.first) + " stream " + std::to_string(key.second) + ": '" + spans[i]->name +
             "' starts before '" + spans[i - 1]->name + "' ends");
  }
  // Issue order: the spans of each stream appear in the order the rank issued their nodes.
  for (const auto& rp : t.plan.ranks)
    for (int stream : {0, 1}) {
      std::vector<std::string> issued;
      for (int id : rp.issue) {
        const auto& n = t.plan.node(id);
        if ((n.stream == schedule::Stream::Compute ? 0 : 1) == stream) issued.push_back(n.label());
      }
      const auto& spans = by_stream[{rp.rank, stream}];
      std::size_t at = 0;
      for (const auto* s : spans) {
        while (at < issued.size() && issued[at] != s->name) ++at;
        if (at == issued.size())
          fail("GPU " + std::to_string(rp.rank) + " stream " + std::to_string(stream) + " ran '" + s->name +
               "' out of issue order");
        ++at;
      }
    }
}

// The summary's figures, recomputed from the spans (definitions in sim/replay.hpp).
void check_summary(const Case& c) {
  const TwinInput t = twin_input(c);
  const auto r = run(t);
  const int gpus = t.plan.global_ranks();
  double step = 0, busy = 0, a2a = 0, max_busy = 0;
  std::vector<double> busy_of(static_cast<std::size_t>(gpus), 0.0);
  for (const auto& s : r.timeline.spans) {
    step = std::max(step, s.end_s());
    if (s.stream == 0) busy_of[static_cast<std::size_t>(s.device)] += s.duration_s;
    if (s.category == "dispatch" || s.category == "combine") a2a += s.duration_s;
  }
  for (double b : busy_of) busy += b, max_busy = std::max(max_busy, b);
  busy /= gpus;
  a2a /= gpus;
  const auto& m = r.summary;
  if (m.gpus != gpus) fail("summary counts " + std::to_string(m.gpus) + " GPUs, the plan has " + std::to_string(gpus));
  if (!close(m.step_time_s, step)) fail("step_time_s " + std::to_string(m.step_time_s) + " != " + std::to_string(step));
  if (!close(m.compute_busy_s, busy))
    fail("compute_busy_s " + std::to_string(m.compute_busy_s) + " != " + std::to_string(busy));
  if (!close(m.max_compute_busy_s, max_busy))
    fail("max_compute_busy_s " + std::to_string(m.max_compute_busy_s) + " != " + std::to_string(max_busy));
  const double bubble = step > 0 ? 1.0 - busy / step : 0.0;
  if (!close(m.bubble_fraction, bubble))
    fail("bubble_fraction " + std::to_string(m.bubble_fraction) + " != 1 - busy/step = " + std::to_string(bubble));
  if (!close(m.a2a_total_s, a2a)) fail("a2a_total_s " + std::to_string(m.a2a_total_s) + " != " + std::to_string(a2a));
  if (m.a2a_exposed_s > m.a2a_total_s * (1 + 1e-9) + 1e-15) fail("more all-to-all exposed than run");
  // Exposed all-to-all: the part of each dispatch/combine span during which no span of the same
  // GPU's compute stream runs, from the union of the compute spans, averaged over the GPUs.
  std::map<int, std::vector<std::pair<double, double>>> compute;
  for (const auto& s : r.timeline.spans)
    if (s.stream == 0) compute[s.device].emplace_back(s.start_s, s.end_s());
  for (auto& [_, v] : compute) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> merged;
    for (const auto& iv : v)
      if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
      else merged.push_back(iv);
    v = std::move(merged);
  }
  double exposed = 0;
  for (const auto& s : r.timeline.spans) {
    if (s.category != "dispatch" && s.category != "combine") continue;
    double covered = 0;
    for (const auto& [b, e] : compute[s.device]) covered += std::max(0.0, std::min(e, s.end_s()) - std::max(b, s.start_s));
    exposed += s.duration_s - covered;
  }
  exposed /= gpus;
  const double tolerance = 1e-9 * std::max(1.0, step) * static_cast<double>(r.timeline.spans.size());
  if (std::fabs(m.a2a_exposed_s - exposed) > tolerance) {
    char text[160];
    std::snprintf(text, sizeof text, "a2a_exposed_s %.12g s != %.12g s recomputed from the spans", m.a2a_exposed_s,
                  exposed);
    fail(text);
  }
  const double hidden = a2a > 0 ? 1.0 - exposed / a2a : 1.0;
  if (std::fabs(m.a2a_hidden_fraction - hidden) > 1e-6)
    fail("a2a_hidden_fraction " + std::to_string(m.a2a_hidden_fraction) + " != 1 - exposed/total = " +
         std::to_string(hidden));
}

// Which transfers the replay starts, counted from the plan (pairwise all-to-all flows: one per
// peer a node sends a whole byte or more; a ring all-reduce without sends: one per member; a
// reduce-scatter, all-gather or all-reduce with sends, NCCL's rings: one to the next member on the
// node when it has one, one to the next node when the group spans several, replay.hpp) plus the
// routing counts: every forward
// dispatch, and only it, first tells each other member of its EP group how many rows follow
// (reference 3.5; Megatron's dispatcher exchanges the counts before the tokens).
void check_flow_count(const Case& c) {
  const TwinInput t = twin_input(c);
  sim::ReplayOptions o;
  o.a2a = sim::A2aModel::Pairwise;
  o.keep_timeline = false;
  const auto r = sim::replay(t.plan, t.platform, t.costs, o);
  auto whole = [](double b) { return b > 0 && std::llround(b) > 0; };
  long long payload = 0, counts = 0;
  for (const auto& n : t.plan.nodes) {
    const schedule::Collective* col = n.collective >= 0 ? &t.plan.collectives[static_cast<std::size_t>(n.collective)] : nullptr;
    bool collective_sends = false;
    if (col != nullptr)
      for (int m : col->nodes) collective_sends = collective_sends || !t.plan.node(m).sends.empty();
    const bool ring = col != nullptr && (col->kind == schedule::CollectiveKind::AllReduce ||
                                         col->kind == schedule::CollectiveKind::AllGather ||
                                         col->kind == schedule::CollectiveKind::ReduceScatter);
    if (ring && !collective_sends) {
      const double members = static_cast<double>(col->nodes.size());
      if (members >= 2 && whole(2.0 * (members - 1) / members * n.mem_bytes)) ++payload;
    } else if (ring) {
      const int gpn = std::max(1, t.platform.gpus_per_node);
      const int me = t.plan.original_rank(n.rank);
      std::set<int> nodes;
      int on_my_node = 0;
      for (int m : col->nodes) {
        const int rk = t.plan.original_rank(t.plan.node(m).rank);
        nodes.insert(rk / gpn);
        on_my_node += rk / gpn == me / gpn;
      }
      double volume = 0;
      for (const auto& s : n.sends)
        if (s.peer != me) volume += s.bytes;
      const double inter = nodes.size() > 1 ? volume / on_my_node : 0;
      if (on_my_node > 1 && whole(volume - inter)) ++payload;
      if (whole(inter)) ++payload;
    } else {
      for (const auto& s : n.sends)
        if (s.peer != n.rank && whole(s.bytes)) ++payload;
    }
    if (col != nullptr && col->kind == schedule::CollectiveKind::AllToAll && n.slot == schedule::Slot::Dispatch &&
        n.phase == schedule::Phase::Forward)
      counts += static_cast<long long>(col->nodes.size()) - 1;
  }
  if (r.summary.flows != payload + counts)
    fail("the replay started " + std::to_string(r.summary.flows) + " transfers; the plan has " +
         std::to_string(payload) + " payload flows and " + std::to_string(counts) +
         " routing-count messages (forward dispatches only)");
}

void check_step_bound(const Case& c) {
  const TwinInput t = twin_input(c);
  const auto r = run(t);
  std::map<std::pair<int, int>, double> busy;
  for (const auto& s : r.timeline.spans) busy[{s.device, s.stream}] += s.duration_s;
  for (const auto& [key, b] : busy)
    if (r.summary.step_time_s + slack(t.plan) < b)
      fail("step " + std::to_string(r.summary.step_time_s) + " s is shorter than GPU " + std::to_string(key.first) +
           " stream " + std::to_string(key.second) + " busy " + std::to_string(b) + " s");
}

void check_deterministic(const Case& c) {
  const TwinInput t = twin_input(c);
  const auto a = run(t), b = run(t);
  expect(a.summary == b.summary, "two replays of one input give different summaries");
  expect(a.timeline.spans == b.timeline.spans, "two replays of one input give different timelines");
}

// Small plans (at most 8 GPUs) on generated platforms (gen::platform_text: both presets, 1 to 8
// GPUs per node, NVLink/NIC rates and latencies, efficiencies, oversubscription, GPU peak), with
// or without interference.
CaseSource twin_cases(const FuzzContext& ctx) {
  const CaseSource plans = general_plan_cases(ctx);
  return {rc::gen::map(rc::gen::tuple(*plans.gen, gen::platform_text(), rc::gen::element(1.0, 1.3)),
                       [](const std::tuple<Case, std::string, double>& t) {
                         Case c = std::get<0>(t);
                         c["platform"] = std::get<1>(t);
                         c["interference"] = std::get<2>(t);
                         return c;
                       }),
          ""};
}

Property make(std::string name, std::string summary, std::function<void(const Case&)> check) {
  return Property{std::move(name), "twin", std::move(summary), twin_cases, std::move(check)};
}

}  // namespace

void add_twin_properties(std::vector<Property>& out) {
  out.push_back(make("twin.stream_serialised", "each simulated stream runs one node at a time, in issue order",
                     check_stream_serialised));
  out.push_back(make("twin.summary",
                     "step, busy, bubble, all-to-all total, exposed and hidden equal those recomputed from the spans",
                     check_summary));
  out.push_back(make("twin.step_bound", "no step is shorter than its busiest stream", check_step_bound));
  out.push_back(make("twin.routing_counts",
                     "the replay starts the plan's payload flows plus routing counts on forward dispatches only",
                     check_flow_count));
  out.push_back(make("twin.deterministic", "a replay is a pure function of plan, platform and costs",
                     check_deterministic));
}

}  // namespace ht::verify::detail
