// Properties of plans on Megatron's full grid (megatron-parallel.md 1-6) over generated patterns
// and layouts (layout_gen.hpp): the plan is well formed and runs (structure, no deadlock), every
// collective's members are exactly one instance of its process group (the grid formulas, written
// again in group_members and checked against the rank coordinates here), the work is conserved
// (tensor and context parallelism split it, never add or drop any: total compute FLOPs equal the
// tp = cp = 1 plan's), tp = cp = 1 plans keep one node per compute slot and phase, and the
// collectives of gradient sync, the optimizer, TP/SP and expert TP carry what a parameter and
// token count written here from megatron-parallel.md gives.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "ht/patterns/pipeline.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/check.hpp"
#include "ht/verify/layout_gen.hpp"
#include "plan_case.hpp"
#include "property_groups.hpp"

namespace ht::verify::detail {
namespace {

using schedule::Node;
using schedule::Phase;
using schedule::Plan;
using schedule::Slot;

Case layout_json(const gen::PlanCase& c, bool shared_expert) {
  Case j = plan_case_json(c, shared_expert);
  const auto& p = c.config;
  j["tp"] = p.tp;
  j["cp"] = p.cp;
  j["etp"] = p.etp;
  j["megatron_sync"] = p.optimizer.sync == schedule::GradSync::Megatron;
  j["distributed_optimizer"] = p.optimizer.distributed;
  if (p.optimizer.fsdp) j["fsdp"] = true;
  j["overlap_grad_reduce"] = p.optimizer.overlap_grad_reduce;
  j["overlap_param_gather"] = p.optimizer.overlap_param_gather;
  j["bucket_elements"] = p.optimizer.bucket_elements;
  schedule::Recompute listed = p.recompute;
  listed.block_layers = -1;  // to_string's "full (block N)" is for people; the case keeps N apart
  listed.uniform_layers = 1;
  j["recompute"] = schedule::to_string(listed);
  if (p.recompute.block_layers >= 0) j["recompute_block_layers"] = p.recompute.block_layers;
  if (p.recompute.uniform_layers > 1) j["recompute_uniform_layers"] = p.recompute.uniform_layers;
  return j;
}

PlanInput layout_input(const Case& c) {
  PlanInput in = input_of(c);
  auto& p = in.config;
  p.tp = c.value("tp", 1);
  p.cp = c.value("cp", 1);
  p.etp = c.value("etp", 1);
  if (c.value("megatron_sync", false)) p.optimizer.sync = schedule::GradSync::Megatron;
  p.optimizer.distributed = c.value("distributed_optimizer", false);
  p.optimizer.fsdp = c.value("fsdp", false);
  p.optimizer.overlap_grad_reduce = c.value("overlap_grad_reduce", false);
  p.optimizer.overlap_param_gather = c.value("overlap_param_gather", false);
  p.optimizer.bucket_elements = c.value("bucket_elements", 0.0);
  p.recompute = schedule::parse_recompute(c.value("recompute", std::string("none")));
  p.recompute.block_layers = c.value("recompute_block_layers", -1);
  p.recompute.uniform_layers = c.value("recompute_uniform_layers", 1);
  return in;
}

CaseSource layout_cases(const FuzzContext& ctx) {
  if (ctx.pattern) return {std::nullopt, "layout properties generate their own patterns"};
  return {rc::gen::map(rc::gen::tuple(gen::layout_case(), rc::gen::arbitrary<bool>()),
                       [](const std::tuple<gen::PlanCase, bool>& t) { return layout_json(std::get<0>(t), std::get<1>(t)); }),
          ""};
}

Plan build(const PlanInput& in) { return schedule::build_plan(in.pattern, in.dims, in.config, in.options); }

void check_well_formed(const Case& c) {
  const PlanInput in = layout_input(c);
  const Plan plan = build(in);
  schedule::check_plan_structure(plan);
  if (const std::string why = schedule::find_deadlock(plan); !why.empty()) fail("deadlock: " + why);
  const auto& cfg = in.config;
  for (const auto& col : plan.collectives) {
    std::vector<int> ranks;
    for (int m : col.nodes) ranks.push_back(plan.node(m).rank);
    std::sort(ranks.begin(), ranks.end());
    if (col.kind == schedule::CollectiveKind::PointToPoint) {
      // Pipeline neighbours: same tp, cp, dp coordinates, adjacent stages.
      const auto a = schedule::rank_coords(cfg, ranks.front()), b = schedule::rank_coords(cfg, ranks.back());
      if (a.tp != b.tp || a.cp != b.cp || a.dp != b.dp) fail("a pipeline transfer crosses tp/cp/dp coordinates");
      continue;
    }
    // The members are every rank that shares all coordinates but the group's own (section 1.1).
    std::vector<int> expected;
    const auto me = schedule::rank_coords(cfg, ranks.front());
    for (int r = 0; r < cfg.global_ranks(); ++r) {
      const auto k = schedule::rank_coords(cfg, r);
      bool same = k.pp == me.pp;
      switch (col.group) {
        case schedule::Group::Tp: same = same && k.cp == me.cp && k.dp == me.dp; break;
        case schedule::Group::Cp: same = same && k.tp == me.tp && k.dp == me.dp; break;
        case schedule::Group::Dp: same = same && k.tp == me.tp; break;
        case schedule::Group::Ep: same = same && k.etp == me.etp && k.edp == me.edp; break;
        case schedule::Group::Etp: same = same && k.ep == me.ep && k.edp == me.edp; break;
        case schedule::Group::Edp: same = same && k.etp == me.etp && k.ep == me.ep; break;
        case schedule::Group::Pp: same = false; break;
      }
      if (same) expected.push_back(r);
    }
    if (ranks != expected)
      fail("collective " + std::to_string(col.id) + " (" + std::string(schedule::to_string(col.group)) +
           ") has members that are not one group instance");
    for (int m : col.nodes)
      for (const auto& t : plan.node(m).sends)
        if (!std::binary_search(ranks.begin(), ranks.end(), t.peer))
          fail("node '" + plan.node(m).label() + "' sends outside its collective");
    // Members agree on what they run: same slot, phase, part, microbatch and layer.
    const Node& first = plan.node(col.nodes.front());
    for (int m : col.nodes) {
      const Node& n = plan.node(m);
      if (n.slot != first.slot || n.phase != first.phase || n.part != first.part || n.microbatch != first.microbatch ||
          n.layer != first.layer)
        fail("collective " + std::to_string(col.id) + " joins '" + first.label() + "' with '" + n.label() + "'");
    }
  }
}

// Total compute FLOPs of the layers, embedding and loss (forward, backward, weight): the work of
// the step, which tp and cp divide among more ranks and must not change.
double step_flops(const Plan& plan) {
  double total = 0;
  for (const Node& n : plan.nodes)
    if (n.stream == schedule::Stream::Compute && n.phase != Phase::Recompute && n.slot != Slot::OptimizerStep)
      total += n.flops;
  return total;
}

void check_conserves_work(const Case& c) {
  PlanInput in = layout_input(c);
  in.options.routing_skew = 0;  // skew moves expert work between ranks; its total is the same
  // With fewer KV heads than TP ranks each rank projects a whole KV group (megatron-parallel.md
  // 2.3): real extra work, so the split is compared where the heads divide.
  in.config.tp = std::min(in.config.tp, in.dims.num_kv_heads);
  const double split = step_flops(build(in));
  PlanInput one = in;
  one.config.tp = one.config.cp = one.config.etp = 1;
  one.config.ep = 1;  // experts' total work does not depend on ep either
  one.options.overlap = one.options.delay_wgrad = one.options.early_attn_release = false;
  in.options.delay_wgrad = false;  // delayed wgrad moves work between B and W nodes only
  const double whole = step_flops(build(one));
  const double again = step_flops(build(in));
  if (std::abs(again - whole) > 1e-9 * whole || std::abs(split - whole) > 1e-9 * whole)
    fail("tp " + std::to_string(in.config.tp) + " x cp " + std::to_string(in.config.cp) + " plans " +
         std::to_string(split) + " FLOPs, the tp = cp = 1 plan " + std::to_string(whole));
}

void check_one_node_per_slot(const Case& c) {
  PlanInput in = layout_input(c);
  in.config.tp = in.config.cp = in.config.etp = 1;
  const Plan plan = build(in);
  std::map<std::tuple<int, int, int, int, bool, int, int>, int> count;
  for (const Node& n : plan.nodes) {
    if (n.part != schedule::Part::Main) fail("a tp = cp = 1 plan has a TP/CP collective: '" + n.label() + "'");
    if (n.stream != schedule::Stream::Compute || n.layer < 0 || n.phase == Phase::Recompute) continue;
    ++count[{n.rank, static_cast<int>(n.phase), n.microbatch, n.vp_stage, n.mtp, n.layer, static_cast<int>(n.slot)}];
  }
  for (const auto& [key, k] : count)
    if (k != 1) fail("a tp = cp = 1 plan splits a compute slot into " + std::to_string(k) + " nodes");
}

// ---- collective sizes against a parameter and token count written here ----------------------

// One rank's parameters, counted from the tables of megatron-parallel.md 2.3, 2.4 and 9 rather
// than from the schedule's params.cpp: TP-sharded weights divided by tp; replicated ones whole
// (their gradients are also summed over TP, 2.4); routed experts E / ep per rank, each / etp.
struct RankParams {
  double dense = 0, replicated = 0, expert = 0;
};

void count_block(char s, const schedule::ModelDims& d, const schedule::ParallelConfig& cfg, RankParams& p) {
  const double h = d.hidden, t = cfg.tp;
  auto shard = [&](double n) { p.dense += n / t; };
  auto whole = [&](double n) {
    p.dense += n;
    p.replicated += n;
  };
  whole(h);  // the block's input norm (fused into its first linear, or its own module)
  switch (s) {
    case '*': {
      // With fewer KV groups than TP ranks, TE is told g = t: one KV group per rank.
      const double g = std::max(d.num_kv_heads, cfg.tp);
      shard(h * (d.num_heads + 2.0 * g) * d.head_dim);
      shard(double(d.num_heads) * d.head_dim * h);
      break;
    }
    case 'M': {
      const double di = double(d.mamba_num_heads) * d.mamba_head_dim, gn = 2.0 * d.mamba_groups * d.mamba_state;
      shard(h * (2 * di + gn + d.mamba_num_heads));  // in_proj: z, x, B, C, dt
      shard((di + gn) * (d.conv_kernel + 1.0));      // depthwise conv1d and its bias (8.1)
      shard(3.0 * d.mamba_num_heads);                // A_log, D, dt_bias
      shard(di);                                     // gated RMSNorm
      shard(di * h);                                 // out_proj
      break;
    }
    case 'G': {
      const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim(), v = double(d.gdn_num_heads) * d.gdn_head_dim;
      shard(h * (2 * qk + 2 * v + 2.0 * d.gdn_num_heads));  // in_proj: q, k, v, z, beta, alpha
      shard((2 * qk + v) * d.conv_kernel);
      shard(2.0 * d.gdn_num_heads);  // A_log, dt_bias
      whole(d.gdn_head_dim);         // the output norm, one head's width, shared by the heads
      shard(v * h);
      break;
    }
    case '-':
      shard(2.0 * h * d.ffn_hidden);
      shard(double(d.ffn_hidden) * h);
      break;
    case 'E':
      whole(h * d.num_experts);  // router
      if (d.shared_expert_ffn > 0) {
        shard(2.0 * h * d.shared_expert_ffn);
        shard(double(d.shared_expert_ffn) * h);
      }
      p.expert += double(d.num_experts / cfg.ep) * (2.0 * h * d.moe_ffn_hidden + double(d.moe_ffn_hidden) * h) / cfg.etp;
      break;
    default: fail(std::string("no parameter count here for '") + s + "'");
  }
}

RankParams rank_params(const PlanInput& in, int pp_rank) {
  const auto& d = in.dims;
  const auto& cfg = in.config;
  patterns::PipelineConfig pc;
  pc.pp = cfg.pp;
  if (cfg.vpp > 0) pc.vpp = cfg.vpp;
  const auto stages = patterns::allocate_stages(in.pattern, pc);
  RankParams p;
  const double h = d.hidden, vocab = double(d.vocab) * h / cfg.tp;
  for (std::size_t si = 0; si < stages.size(); ++si) {
    if (stages[si].pp_rank != pp_rank) continue;
    if (si == 0) p.dense += vocab;  // embedding
    for (const auto& item : stages[si].items)
      for (char s : item.symbols) count_block(s, d, cfg, p);
    if (si + 1 == stages.size()) {
      p.dense += vocab + h;  // output layer and final norm
      p.replicated += h;
      for (int k = 0; k < in.pattern.mtp_depths; ++k) {
        p.dense += 2.0 * h * h / cfg.tp + 3.0 * h;  // eh_proj (column-parallel); enorm, hnorm, final norm
        p.replicated += 3.0 * h;
        for (char s : in.pattern.mtp) count_block(s, d, cfg, p);
      }
    }
  }
  return p;
}

bool near(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)}); }

std::string num(double v) {
  std::ostringstream o;
  o.precision(12);
  o << v;
  return o.str();
}

// Every gradient reduction, parameter gather and optimizer step of every rank against the
// parameter count above: the end-of-step all-reduces (bf16 gradients, 2B/n to each of the n-1
// peers), or Megatron's buckets (fp32 gradients; all-reduce 2B/n, reduce-scatter B/n per peer),
// the all-reduce of the replicated gradients over TP, the distributed optimizer's bf16 gathers
// and an optimizer step over the rank's (shard of the) parameters; the dense group has dp x cp
// ranks, the expert group tp x cp x dp / (ep x etp). TP/SP gathers and scatters move a block's
// hidden-wide activations of the rank's tokens (micro_batch x seq_len / (tp x cp)), the heads
// (loss, MTP depths) as many times as there are; expert-TP gathers and scatters move the rows
// the rank received (balanced routing: its tokens x top_k), a balanced all-to-all 1/ep of the
// rank's tokens x top_k routed copies to each EP peer, and CP's head-parallel all-to-alls and
// ring attention what megatron-parallel.md 3.2-3.4 gives.
void check_layout_bytes(const Case& c) {
  const PlanInput in = layout_input(c);
  const Plan plan = build(in);
  const auto& d = in.dims;
  const auto& cfg = in.config;
  const auto& opt = cfg.optimizer;
  const bool megatron = opt.sync == schedule::GradSync::Megatron;
  const double dp_group = double(cfg.dp) * cfg.cp, edp_group = double(cfg.stage_ranks()) / (cfg.ep * cfg.etp);
  const double owned = double(d.micro_batch) * d.seq_len / (double(cfg.tp) * cfg.cp);
  const double activations = owned * d.hidden * d.bytes_per_element;
  std::map<int, RankParams> counted;
  for (int pp = 0; pp < cfg.pp; ++pp) counted[pp] = rank_params(in, pp);

  struct Seen {
    double dense = 0, expert = 0, replicated = 0, gather_dense = 0, gather_expert = 0, step_flops = -1;
  };
  std::map<int, Seen> seen;
  for (const Node& n : plan.nodes) {
    Seen& s = seen[n.rank];
    const std::string where = "rank " + std::to_string(n.rank) + " '" + n.label() + "'";
    auto per_peer = [&](double each, std::size_t peers, const std::string& what) {
      if (n.sends.size() != peers)
        fail(where + " sends to " + std::to_string(n.sends.size()) + " peers, " + what + " has " + std::to_string(peers));
      for (const auto& t : n.sends)
        if (!near(t.bytes, each)) fail(where + " sends " + num(t.bytes) + " bytes to a peer, " + what + " gives " + num(each));
    };
    if (n.slot == Slot::GradAllReduce) {
      const bool expert = n.symbols == "expert", replicated = n.symbols == "tp_replicated";
      const double group = replicated ? cfg.tp : expert ? edp_group : dp_group;
      const double elements = n.mem_bytes / (megatron ? 4.0 : d.bytes_per_element);
      (replicated ? s.replicated : expert ? s.expert : s.dense) += elements;
      const bool scatter = megatron && (opt.distributed || opt.fsdp) && !replicated;
      per_peer((scatter ? 1.0 : 2.0) * n.mem_bytes / group, static_cast<std::size_t>(group) - 1,
               scatter ? "a reduce-scatter over its group" : "an all-reduce over its group");
    } else if (n.slot == Slot::ParamGather) {
      const bool expert = n.symbols == "expert";
      (expert ? s.gather_expert : s.gather_dense) += n.mem_bytes / 2.0;
      const double group = expert ? edp_group : dp_group;
      per_peer(n.mem_bytes / group, static_cast<std::size_t>(group) - 1, "an all-gather of bf16 parameters");
    } else if (n.slot == Slot::OptimizerStep) {
      s.step_flops = n.flops;
    } else if (n.part == schedule::Part::TpGather || n.part == schedule::Part::TpScatter) {
      // Widths in hidden units. The heads: one per prediction depth. An MTP depth's input
      // ('m', forward): the embedding's reduce-scatter (h), then the gathers of eh_proj's 2h
      // input and of its output's last dimension (h); its backward lumps the reference's
      // gathers and scatters differently and is not checked here.
      const bool gather = n.part == schedule::Part::TpGather;
      double width = 1.0;
      if (n.symbols == "o") width = n.slot == Slot::PostProcess ? 1.0 + in.pattern.mtp_depths : 1.0;
      if (n.symbols == "m") {
        if (n.phase != Phase::Forward) continue;
        width = gather ? 3.0 : 1.0;
      }
      per_peer(width * activations, static_cast<std::size_t>(cfg.tp) - 1,
               "a TP/SP collective of its block's activations");
    } else if (n.part == schedule::Part::CpExchange) {
      // Head-parallel all-to-alls (3.3, 3.4) of the CP shard's N = micro_batch x seq_len / cp
      // tokens, each keeping 1/cp of its tensor: Mamba's z, x, B, C (B/C group states repeated
      // r = cp / (G/tp) times when G/tp < cp), dt and y back; GDN's fused in_proj output and y.
      const double n_cp = double(d.micro_batch) * d.seq_len / cfg.cp, t = cfg.tp;
      double width = 0;
      if (n.symbols == "M") {
        const double di = double(d.mamba_num_heads) * d.mamba_head_dim / t, g = d.mamba_groups / t;
        const double r = g < cfg.cp ? cfg.cp / g : 1.0;
        width = 2 * di + 2 * r * g * d.mamba_state + d.mamba_num_heads / t + di;
      } else if (n.symbols == "G") {
        const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim() / t, v = double(d.gdn_num_heads) * d.gdn_head_dim / t;
        width = 2 * qk + 2 * v + 2.0 * d.gdn_num_heads / t + v;
      } else {
        fail(where + ": a CP all-to-all of a block that has none");
      }
      per_peer(n_cp * width * d.bytes_per_element / cfg.cp, static_cast<std::size_t>(cfg.cp) - 1,
               "a head-parallel CP all-to-all");
    } else if (n.part == schedule::Part::Main && n.stream == schedule::Stream::Compute && n.symbols == "*" &&
               cfg.cp > 1 && (n.phase == Phase::Forward || n.phase == Phase::Backward)) {
      // Ring attention (3.2, p2p): K and V of the CP shard, K = (s/c) b g_t d elements each with
      // g_t = max(1, g/t), sent c - 1 times to the next rank; the backward sends dKV as well.
      const double g_t = std::max(1.0, double(d.num_kv_heads) / cfg.tp);
      const double kv = 2.0 * double(d.micro_batch) * d.seq_len / cfg.cp * g_t * d.head_dim;
      per_peer((n.phase == Phase::Backward ? 2.0 : 1.0) * (cfg.cp - 1) * kv * d.bytes_per_element, 1,
               "ring attention's key/value blocks");
    } else if (n.part == schedule::Part::Main && n.stream == schedule::Stream::Comm &&
               (n.slot == Slot::Dispatch || n.slot == Slot::Combine) &&
               in.options.routing_skew == 0.0) {
      // Balanced routing: the rank's tokens x top_k routed copies, 1/ep of them to each peer.
      per_peer(owned * d.top_k * d.hidden * d.bytes_per_element / cfg.ep, static_cast<std::size_t>(cfg.ep) - 1,
               "a balanced all-to-all of the rank's routed copies");
    } else if ((n.part == schedule::Part::EtpGather || n.part == schedule::Part::EtpScatter) &&
               in.options.routing_skew == 0.0) {
      per_peer(owned * d.top_k * d.hidden * d.bytes_per_element, static_cast<std::size_t>(cfg.etp) - 1,
               "an expert-TP collective of the rows the rank received");
    }
  }
  for (int rank = 0; rank < cfg.global_ranks(); ++rank) {
    const RankParams& want = counted.at(schedule::rank_coords(cfg, rank).pp);
    const Seen& got = seen[rank];
    const std::string who = "rank " + std::to_string(rank) + ": ";
    auto expect_eq = [&](double g, double w, const std::string& what) {
      if (!near(g, w)) fail(who + what + " " + num(g) + " elements, the parameter count gives " + num(w));
    };
    // A group of one rank has nothing to reduce or gather. Megatron-FSDP reduces every unit once
    // per microbatch and gathers it twice (forward, backward); the others once per step.
    const bool fsdp = megatron && opt.fsdp;
    const double reduces = fsdp ? cfg.microbatches : 1.0, gathers = fsdp ? 2.0 * cfg.microbatches : 1.0;
    expect_eq(got.dense, dp_group > 1 ? reduces * want.dense : 0.0, "reduces dense gradients of");
    expect_eq(got.expert, edp_group > 1 ? reduces * want.expert : 0.0, "reduces expert gradients of");
    expect_eq(got.replicated, cfg.tp > 1 ? want.replicated : 0.0, "sums replicated gradients over TP of");
    if (megatron && (opt.distributed || fsdp)) {
      expect_eq(got.gather_dense, dp_group > 1 ? gathers * want.dense : 0.0, "gathers dense parameters of");
      expect_eq(got.gather_expert, edp_group > 1 ? gathers * want.expert : 0.0, "gathers expert parameters of");
    }
    if (megatron) {
      const bool sharded = opt.distributed || fsdp;
      const double shard_dense = sharded ? dp_group : 1.0, shard_expert = sharded ? edp_group : 1.0;
      expect_eq(got.step_flops / 12.0, want.dense / shard_dense + want.expert / shard_expert,
                "updates (optimizer step FLOPs / 12)");
    }
  }
}

Property make(std::string name, std::string summary, void (*check)(const Case&)) {
  return Property{std::move(name), "plan", std::move(summary), layout_cases, check};
}

}  // namespace

void add_layout_properties(std::vector<Property>& out) {
  out.push_back(make("plan.layout_well_formed",
                     "TP/CP/ETP/DDP/recompute plans are well formed, run, and every collective is one group instance",
                     check_well_formed));
  out.push_back(make("plan.layout_conserves_work",
                     "tensor and context parallelism split the step's compute FLOPs without changing their total",
                     check_conserves_work));
  out.push_back(make("plan.layout_collective_bytes",
                     "gradient reductions, parameter gathers, the optimizer step, TP/SP and expert-TP collectives "
                     "carry what a parameter and token count written in the test gives",
                     check_layout_bytes));
  out.push_back(make("plan.layout_tp1_unchanged",
                     "tp = cp = 1 plans have no TP/CP collectives and one node per compute slot and phase",
                     check_one_node_per_slot));
}

}  // namespace ht::verify::detail
