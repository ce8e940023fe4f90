// Plan properties (reference sections 3.5, 3.6, 5.2) over generated patterns and parallel
// configs: every node scheduled exactly once (against a count written from the pattern), no
// cycle, per-microbatch chains, F/B/W pairing, all-to-alls in lock step with every peer, the
// 13-step order (against plan_oracle), determinism and the JSON round trip.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "ht/patterns/pattern.hpp"
#include "ht/patterns/pipeline.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/plan_json.hpp"
#include "ht/verify/plan_gen.hpp"
#include "ht/verify/plan_oracle.hpp"
#include "plan_case.hpp"
#include "property_groups.hpp"

namespace ht::verify::detail {
namespace {

using schedule::CollectiveKind;
using schedule::Node;
using schedule::Phase;
using schedule::Plan;
using schedule::Slot;

Plan build(const PlanInput& in) { return schedule::build_plan(in.pattern, in.dims, in.config, in.options); }

// ---- checks ------------------------------------------------------------------------------------

// Every node is issued exactly once, by its own rank; and the layer nodes of every rank are
// exactly those the pattern calls for: for each microbatch, each logical layer of the stages
// this rank holds (reference 1.3 allocation) and each slot it has, one F and one B, plus one W
// where the slot owns delayed weight gradients; pre/post-process on the first/last stage.
void check_every_node_once(const Case& c) {
  const PlanInput in = input_of(c);
  const Plan plan = build(in);
  std::vector<int> issued(plan.nodes.size(), 0);
  for (const auto& rp : plan.ranks)
    for (int id : rp.issue) {
      if (id < 0 || id >= static_cast<int>(plan.nodes.size())) fail("issue list names node " + std::to_string(id));
      ++issued[static_cast<std::size_t>(id)];
      if (plan.node(id).rank != rp.rank) fail("node '" + plan.node(id).label() + "' issued by another rank");
    }
  for (std::size_t i = 0; i < issued.size(); ++i)
    if (issued[i] != 1)
      fail("node '" + plan.nodes[i].label() + "' issued " + std::to_string(issued[i]) + " times");

  using Key = std::tuple<int, int, int, int, bool, int, int>;  // rank, phase, mb, vp, mtp, layer, slot
  std::map<Key, int> expected, got;
  patterns::PipelineConfig pc;
  pc.pp = in.config.pp;
  if (in.config.vpp > 0) pc.vpp = in.config.vpp;
  const auto stages = patterns::allocate_stages(in.pattern, pc);
  const bool shared = in.dims.shared_expert_ffn > 0;
  const int last_stage = static_cast<int>(stages.size()) - 1;
  for (int rank = 0; rank < in.config.global_ranks(); ++rank) {
    const int pp_rank = rank / in.config.dp;
    for (int si = 0; si <= last_stage; ++si) {
      const auto& st = stages[static_cast<std::size_t>(si)];
      if (st.pp_rank != pp_rank) continue;
      for (int mb = 0; mb < in.config.microbatches; ++mb) {
        auto add_layer = [&](const std::string& symbols, int layer, bool mtp) {
          for (Slot s : {Slot::PreDispatch, Slot::Dispatch, Slot::Mlp, Slot::Combine, Slot::MtpPost}) {
            if (!layer_has_slot(symbols, mtp, s)) continue;
            ++expected[{rank, 0, mb, st.vp_stage, mtp, layer, static_cast<int>(s)}];
            ++expected[{rank, 1, mb, st.vp_stage, mtp, layer, static_cast<int>(s)}];
            if (in.options.delay_wgrad && layer_has_weight(symbols, mtp, s, shared))
              ++expected[{rank, 2, mb, st.vp_stage, mtp, layer, static_cast<int>(s)}];
          }
        };
        for (std::size_t i = 0; i < st.items.size(); ++i)
          add_layer(st.items[i].symbols, st.logical_offset + static_cast<int>(i), false);
        if (si == last_stage)
          for (int d = 0; d < in.pattern.mtp_depths; ++d) add_layer(in.pattern.mtp, d, true);
        for (int phase : {0, 1}) {
          if (si == 0) ++expected[{rank, phase, mb, st.vp_stage, false, -1, static_cast<int>(Slot::PreProcess)}];
          if (si == last_stage) ++expected[{rank, phase, mb, st.vp_stage, false, -1, static_cast<int>(Slot::PostProcess)}];
        }
      }
    }
  }
  for (const Node& n : plan.nodes) {
    if (n.slot == Slot::PipeSend || n.slot == Slot::PipeRecv || n.slot == Slot::GradAllReduce) continue;
    ++got[{n.rank, static_cast<int>(n.phase), n.microbatch, n.vp_stage, n.mtp, n.layer, static_cast<int>(n.slot)}];
  }
  if (got != expected) {
    for (const auto& [k, v] : expected)
      if (got[k] != v) {
        const auto& [rank, phase, mb, vp, mtp, layer, slot] = k;
        fail("rank " + std::to_string(rank) + " has " + std::to_string(got[k]) + " x " + "FBW"[phase] + " mb" +
             std::to_string(mb) + " vp" + std::to_string(vp) + (mtp ? " MTP" : " L") + std::to_string(layer) + " " +
             std::string(schedule::to_string(static_cast<Slot>(slot))) + ", expected " + std::to_string(v));
      }
    fail("the plan has layer nodes the pattern does not call for");
  }
}

// Stream order + deps + collective rendezvous form no cycle (schedule::find_deadlock), and every
// same-rank dependency was issued earlier.
void check_acyclic(const Case& c) {
  const Plan plan = build(input_of(c));
  schedule::check_plan_structure(plan);
  const std::string deadlock = schedule::find_deadlock(plan);
  if (!deadlock.empty()) fail("deadlock: " + deadlock);
  for (const auto& rp : plan.ranks) {
    std::map<int, std::size_t> position;
    for (std::size_t i = 0; i < rp.issue.size(); ++i) position[rp.issue[i]] = i;
    for (int id : rp.issue)
      for (int d : plan.node(id).deps)
        if (plan.node(d).rank == rp.rank && position.at(d) >= position.at(id))
          fail("'" + plan.node(id).label() + "' depends on the later '" + plan.node(d).label() + "'");
  }
}

// Reference 3.5: one event per microbatch chunk, so each node of a (microbatch, chunk) on a rank
// depends on the previous one of that chain, across both streams.
void check_microbatch_chain(const Case& c) {
  const Plan plan = build(input_of(c));
  for (const auto& rp : plan.ranks) {
    std::map<std::pair<int, int>, int> last;
    for (int id : rp.issue) {
      const Node& n = plan.node(id);
      if (n.microbatch < 0) continue;
      const auto key = std::make_pair(n.microbatch, n.vp_stage);
      const auto it = last.find(key);
      if (it != last.end() && std::find(n.deps.begin(), n.deps.end(), it->second) == n.deps.end())
        fail("rank " + std::to_string(rp.rank) + ": '" + n.label() + "' does not wait for '" +
             plan.node(it->second).label() + "' of its microbatch chain");
      last[key] = id;
    }
  }
}

// Every forward layer slot has one backward, and a W exactly when delayed and weighted; members
// of an all-to-all run the same slot of the same layer and microbatch, one per EP rank, and each
// sends to every other member of its group.
void check_ep_lockstep(const Case& c) {
  const PlanInput in = input_of(c);
  const Plan plan = build(in);
  for (const auto& col : plan.collectives) {
    if (col.kind != CollectiveKind::AllToAll) continue;
    if (static_cast<int>(col.nodes.size()) != in.config.ep)
      fail("an all-to-all of " + std::to_string(col.nodes.size()) + " members with ep = " + std::to_string(in.config.ep));
    const Node& a = plan.node(col.nodes.front());
    std::set<int> members;
    for (int m : col.nodes) members.insert(plan.node(m).rank);
    for (int m : col.nodes) {
      const Node& b = plan.node(m);
      if (std::tie(a.slot, a.phase, a.microbatch, a.layer, a.mtp) != std::tie(b.slot, b.phase, b.microbatch, b.layer, b.mtp))
        fail("all-to-all pairs '" + a.label() + "' with '" + b.label() + "'");
      std::set<int> peers;
      for (const auto& t : b.sends) peers.insert(t.peer);
      std::set<int> want = members;
      want.erase(b.rank);
      if (peers != want)
        fail("rank " + std::to_string(b.rank) + " '" + b.label() + "' sends to " + std::to_string(peers.size()) +
             " peers, its EP group has " + std::to_string(want.size()) + " others");
    }
  }
}

// Transfer sizes against a token count written here (tp = cp = 1 in these cases): a microbatch
// of T = micro_batch x seq_len tokens sends T x top_k routed copies of hidden x bytes each
// through its dispatch, all of them somewhere: with balanced routing each other EP rank gets
// 1/ep of them; under skew the receivers' shares (toward the experts) or the senders' shares
// (back from them) still sum to the whole. Every forward dispatch i -> j moves what the backward
// combine moves i -> j (the gradients of the same copies), and every forward combine i -> j what
// the backward dispatch moves. A pipeline transfer carries T x hidden x bytes.
void check_collective_bytes(const Case& c) {
  const PlanInput in = input_of(c);
  const Plan plan = build(in);
  const auto& d = in.dims;
  const double tokens = double(d.micro_batch) * d.seq_len;
  const double routed = tokens * d.top_k * d.hidden * d.bytes_per_element;
  const double activations = tokens * d.hidden * d.bytes_per_element;
  const int ep = in.config.ep;
  auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); };
  // bytes[(slot, phase, microbatch, layer, mtp)][(from, to)]
  std::map<std::tuple<int, int, int, int, bool>, std::map<std::pair<int, int>, double>> moved;
  for (const auto& col : plan.collectives) {
    if (col.kind == CollectiveKind::PointToPoint) {
      for (int m : col.nodes)
        for (const auto& t : plan.node(m).sends)
          if (!near(t.bytes, activations))
            fail("'" + plan.node(m).label() + "' sends " + std::to_string(t.bytes) + " bytes down the pipeline, a " +
                 "microbatch's activations are " + std::to_string(activations));
      continue;
    }
    if (col.kind != CollectiveKind::AllToAll) continue;
    for (int m : col.nodes) {
      const Node& n = plan.node(m);
      auto& into = moved[{static_cast<int>(n.slot), static_cast<int>(n.phase), n.microbatch, n.layer, n.mtp}];
      for (const auto& t : n.sends) into[{n.rank, t.peer}] = t.bytes;
    }
  }
  for (const auto& [key, pairs] : moved) {
    const auto [slot, phase, mb, layer, mtp] = key;
    const bool toward = (slot == static_cast<int>(Slot::Dispatch)) == (phase != static_cast<int>(Phase::Backward));
    const std::string where = std::string(slot == static_cast<int>(Slot::Dispatch) ? "dispatch" : "combine") +
                              (phase == static_cast<int>(Phase::Backward) ? " backward" : " forward") +
                              " of microbatch " + std::to_string(mb) + " layer " + std::to_string(layer);
    if (in.options.routing_skew == 0.0) {
      for (const auto& [fromto, bytes] : pairs)
        if (!near(bytes, routed / ep))
          fail(where + ": rank " + std::to_string(fromto.first) + " sends " + std::to_string(bytes) + " bytes to " +
               std::to_string(fromto.second) + ", balanced routing sends " + std::to_string(routed / ep));
    } else {
      // The share of the rank the bytes are about: the receiver toward the experts, else the
      // sender. Read off each pair, every rank's share must agree and all shares sum to one.
      std::map<int, double> share;
      for (const auto& [fromto, bytes] : pairs) {
        const int owner = toward ? fromto.second : fromto.first;
        const auto [it, fresh] = share.try_emplace(owner, bytes / routed);
        if (!fresh && !near(it->second * routed, bytes))
          fail(where + ": rank " + std::to_string(owner) + "'s share differs between its transfers");
      }
      double sum = 0;
      for (const auto& [_, v] : share) sum += v;
      if (static_cast<int>(share.size()) == ep && std::fabs(sum - 1.0) > 1e-9)
        fail(where + ": the EP ranks' shares of the routed tokens sum to " + std::to_string(sum) + ", not 1");
    }
    // The backward mirror: dispatch F <-> combine B, combine F <-> dispatch B, same direction.
    if (phase != static_cast<int>(Phase::Forward)) continue;
    const int mirror_slot = slot == static_cast<int>(Slot::Dispatch) ? static_cast<int>(Slot::Combine)
                                                                     : static_cast<int>(Slot::Dispatch);
    const auto it = moved.find({mirror_slot, static_cast<int>(Phase::Backward), mb, layer, mtp});
    if (it == moved.end()) fail(where + " has no backward mirror");
    for (const auto& [fromto, bytes] : pairs) {
      const auto b = it->second.find(fromto);
      if (b == it->second.end() || !near(b->second, bytes))
        fail(where + ": rank " + std::to_string(fromto.first) + " -> " + std::to_string(fromto.second) + " moves " +
             std::to_string(bytes) + " bytes forward, its backward mirror " +
             (b == it->second.end() ? std::string("nothing") : std::to_string(b->second)));
    }
  }
}

// The combined-1F1B issue order equals the one spelled out from reference 3.6 (plan_oracle).
void check_13_step_order(const Case& c) {
  const PlanInput in = input_of(c);
  const Plan plan = build(in);
  std::vector<std::string> layers;
  for (const auto& item : in.pattern.items()) layers.push_back(item.symbols);
  const auto expected = combined_1f1b_order(layers, in.config.microbatches, in.options.delay_wgrad,
                                            in.options.early_attn_release, in.dims.shared_expert_ffn > 0);
  for (const auto& rp : plan.ranks) {
    std::vector<ExpectedNode> got;
    for (int id : rp.issue) {
      const Node& n = plan.node(id);
      if (n.microbatch < 0) continue;
      got.push_back({n.phase, n.microbatch, n.layer, n.slot});
    }
    const std::size_t common = std::min(got.size(), expected.size());
    for (std::size_t i = 0; i < common; ++i)
      if (!(got[i] == expected[i]))
        fail("rank " + std::to_string(rp.rank) + " issues '" + label(got[i]) + "' at position " + std::to_string(i) +
             ", the 13-step order has '" + label(expected[i]) + "'");
    if (got.size() != expected.size())
      fail("rank " + std::to_string(rp.rank) + " issues " + std::to_string(got.size()) + " nodes, expected " +
           std::to_string(expected.size()));
  }
}

void check_json_roundtrip(const Case& c) {
  const PlanInput in = input_of(c);
  const Plan plan = build(in);
  const std::string text = schedule::plan_to_json(plan);
  expect(schedule::plan_to_json(build(in)) == text, "the same input built a different plan");
  const Plan back = schedule::plan_from_json(text);
  expect(back == plan, "the plan read back differs");
  expect(schedule::plan_to_json(back) == text, "the plan written again differs");
}

// ---- case sources ------------------------------------------------------------------------------

CaseSource combined_cases(const FuzzContext& ctx) {
  rc::Gen<gen::PlanCase> g = gen::combined_1f1b_case();
  if (ctx.pattern) {
    const auto p = patterns::parse(*ctx.pattern);
    if (p.segment_count() > 1) return {std::nullopt, "the pattern has pipe segments (the 13-step oracle is PP = 1)"};
    if (!gen::overlap_allowed(p) || p.flattened_symbols().find('E') == std::string::npos)
      return {std::nullopt, "the pattern cannot run the EP overlap (rules O1, O3 or no MoE)"};
    const std::string text = p.text;
    g = rc::gen::map(g, [text](gen::PlanCase c) {
      c.pattern = text;
      return c;
    });
  }
  return {rc::gen::map(rc::gen::tuple(g, rc::gen::arbitrary<bool>()),
                       [](const std::tuple<gen::PlanCase, bool>& t) { return plan_case_json(std::get<0>(t), std::get<1>(t)); }),
          ""};
}

Property make(std::string name, std::string summary, std::function<CaseSource(const FuzzContext&)> cases,
              std::function<void(const Case&)> check) {
  return Property{std::move(name), "plan", std::move(summary), std::move(cases), std::move(check)};
}

}  // namespace

void add_plan_properties(std::vector<Property>& out) {
  out.push_back(make("plan.every_node_once",
                     "each node issued once by its rank; layer nodes are exactly those the pattern and stages call for",
                     general_plan_cases, check_every_node_once));
  out.push_back(make("plan.acyclic", "stream order, deps and rendezvous form no cycle; same-rank deps come earlier",
                     general_plan_cases, check_acyclic));
  out.push_back(make("plan.microbatch_chain", "every node waits for the previous node of its microbatch chunk",
                     general_plan_cases, check_microbatch_chain));
  out.push_back(make("plan.ep_lockstep", "all-to-all members match and each sends to every other EP group member",
                     general_plan_cases, check_ep_lockstep));
  out.push_back(make("plan.collective_bytes",
                     "all-to-all and pipeline transfers carry the routed copies and activations a token count gives",
                     general_plan_cases, check_collective_bytes));
  out.push_back(make("plan.13_step_order", "combined 1F1B issues nodes in the 13-step order of reference 3.6",
                     combined_cases, check_13_step_order));
  out.push_back(make("plan.json_roundtrip", "plans are deterministic and survive the JSON round trip byte for byte",
                     general_plan_cases, check_json_roundtrip));
}

}  // namespace ht::verify::detail
