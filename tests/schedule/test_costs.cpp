// Cost closed forms recomputed by hand for the tiny model (T = 2 x 32 = 64 tokens, hidden 64,
// top-k 2, bf16): all-to-all bytes (reference simulators.md section 4), routing skew, flops of
// dense MLP and experts split into B and W, p2p and all-reduce bytes.
#include <catch2/catch.hpp>

#include <numeric>

#include "helpers.hpp"
#include "ht/schedule/costs.hpp"
#include "ht/schedule/summary.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {
const ModelDims kTiny = tiny_model();
constexpr double kPayload = 64.0 * 2 * 64 * 2;  // tokens * top_k * hidden * bytes = 16384
}  // namespace

TEST_CASE("balanced dispatch sends payload/ep to every peer, (ep-1)/ep leaves the device",
          "[schedule][costs]") {
  CHECK(routed_payload_bytes(kTiny) == kPayload);
  for (int ep : {2, 4, 8}) {
    const Plan plan = make_plan("[*E]", parallel(ep, ep, 1), options(true, false));
    for (const Node& n : plan.nodes) {
      if (n.slot != Slot::Dispatch && n.slot != Slot::Combine) continue;
      REQUIRE(n.sends.size() == static_cast<std::size_t>(ep - 1));
      double total = 0;
      for (const Transfer& t : n.sends) {
        CHECK(t.bytes == Approx(kPayload / ep));
        CHECK(t.peer != n.rank);
        total += t.bytes;
      }
      CHECK(total == Approx(kPayload * (ep - 1) / ep));
      CHECK(n.mem_bytes == Approx(2 * kPayload * (ep - 1) / ep));
      CHECK(n.flops == 0);
    }
  }
}

TEST_CASE("skewed routing sends Zipf shares, and combine and backward mirror dispatch",
          "[schedule][costs]") {
  // s = 1, ep = 2: shares 1 : 1/2 -> 2/3, 1/3.
  const auto shares = routing_shares(2, 1.0);
  CHECK(shares[0] == Approx(2.0 / 3));
  CHECK(shares[1] == Approx(1.0 / 3));
  CHECK(a2a_bytes(kTiny, 2, 1.0, Slot::Dispatch, Phase::Forward, 0, 1) == Approx(kPayload / 3));
  CHECK(a2a_bytes(kTiny, 2, 1.0, Slot::Dispatch, Phase::Forward, 1, 0) == Approx(kPayload * 2 / 3));
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) {
      if (a == b) continue;
      const double dispatch_ab = a2a_bytes(kTiny, 4, 0.7, Slot::Dispatch, Phase::Forward, a, b);
      CHECK(a2a_bytes(kTiny, 4, 0.7, Slot::Combine, Phase::Forward, b, a) == dispatch_ab);
      CHECK(a2a_bytes(kTiny, 4, 0.7, Slot::Dispatch, Phase::Backward, b, a) == dispatch_ab);
      CHECK(a2a_bytes(kTiny, 4, 0.7, Slot::Combine, Phase::Backward, a, b) == dispatch_ab);
    }
  // Expert load follows the share: rank 0 processes 2 x 64 x 2 x 2/3 copies.
  CHECK(routed_copies(kTiny, 2, 0, 1.0) == Approx(2 * 64 * 2 * 2.0 / 3));
  const double sum = routed_copies(kTiny, 4, 0, 0.7) + routed_copies(kTiny, 4, 1, 0.7) +
                     routed_copies(kTiny, 4, 2, 0.7) + routed_copies(kTiny, 4, 3, 0.7);
  CHECK(sum == Approx(4 * 64 * 2));
}

TEST_CASE("dense MLP flops: 6*T*h*ffn GEMM + 3*T*ffn SwiGLU + its norm and residual, backward doubles",
          "[schedule][costs]") {
  // The layer's pre-norm (4 flops per element of T x h) and residual add (1) come with it.
  const double gemm = 6.0 * 64 * 64 * 128, other = 3.0 * 64 * 128 + 5.0 * 64 * 64;
  const SlotWork w = symbol_work('-', kTiny);
  CHECK(w.weight_gemm_flops == gemm);
  CHECK(w.other_flops == other);
  CHECK(w.weight_bytes == 3.0 * 64 * 128 * 2);
  CHECK(phase_cost(w, Phase::Forward, false).flops == gemm + other);
  CHECK(phase_cost(w, Phase::Backward, false).flops == 2 * (gemm + other));
  CHECK(phase_cost(w, Phase::Backward, true).flops == gemm + 2 * other);
  CHECK(phase_cost(w, Phase::Weight, true).flops == gemm);
}

TEST_CASE("expert mlp nodes carry T*top_k copies under balanced routing, split B and W",
          "[schedule][costs]") {
  const Plan plan = make_plan("[*E]", parallel(2, 2, 1), options(true, true));
  const double copies = 64.0 * 2;
  const double gemm = 6 * copies * 64 * 32, other = 3 * copies * 32;
  int seen = 0;
  for (const Node& n : plan.nodes) {
    if (n.slot != Slot::Mlp) continue;
    ++seen;
    const double expected = n.phase == Phase::Forward    ? gemm + other
                            : n.phase == Phase::Backward ? gemm + 2 * other
                                                         : gemm;
    CHECK(n.flops == expected);
  }
  CHECK(seen == 2 * 3);
}

TEST_CASE("a given expert load prices every EP rank's expert rows at that multiple of the mean", "[schedule][costs]") {
  // --expert-load 1.6: the busiest rank's rows (T top_k / ep x 1.6 here, the routed copies of the
  // group spread over 2 ranks) set every rank's expert work, in place of --routing's model.
  ScheduleOptions given = options(true, true);
  given.routing = Routing::AuxLoss;
  given.expert_load = 1.6;
  const Plan plan = make_plan("[*E]", parallel(2, 2, 1), given);
  CHECK(plan.expert_load_factor == 1.6);
  const double copies = 64.0 * 2 * 1.6;
  const double gemm = 6 * copies * 64 * 32, other = 3 * copies * 32;
  int seen = 0;
  for (const Node& n : plan.nodes) {
    if (n.slot != Slot::Mlp || n.phase != Phase::Forward) continue;
    ++seen;
    CHECK(n.flops == Approx(gemm + other));
  }
  CHECK(seen == 2);
  // Without experts across ranks it changes nothing.
  ScheduleOptions alone = options(false, false);
  alone.expert_load = 1.6;
  CHECK(make_plan("[*E]", parallel(1, 1, 1), alone).expert_load_factor == 1);
  // The busiest node's load (DeepEP's RDMA copies): the given rank's unless given itself.
  CHECK(plan.expert_node_load_factor == 1.6);
  given.expert_node_load = 1.1;
  const Plan node = make_plan("[*E]", parallel(2, 2, 1), given);
  CHECK(node.expert_load_factor == 1.6);
  CHECK(node.expert_node_load_factor == 1.1);
}

TEST_CASE("the busiest node's load pools the fewest ranks a node holds of any EP group that spans nodes",
          "[schedule][costs]") {
  ScheduleOptions o = options(false, false);
  o.routing = Routing::AuxLoss;
  o.dispatcher = Dispatcher::DeepEP;
  o.nvlink_domain = 8;
  ModelDims d = tiny_model();
  d.num_experts = 48;
  d.top_k = 4;
  // EP 12 on nodes of 8: a group's nodes hold 8 and 4 of its ranks; the 4 pool 16 of 48 experts.
  const Plan uneven = make_plan("[*E]", parallel(12, 12, 2), o, d);
  CHECK(uneven.expert_node_load_factor == expert_load_factor(d, 12, shard_of(parallel(12, 12, 2)), o.routing, 4));
  CHECK(uneven.expert_node_load_factor > 1);
  CHECK(uneven.expert_node_load_factor < uneven.expert_load_factor);
  // EP 6 over 12 ranks: group 0 stays on node 0, group 1 (ranks 6-11) spans 2 + 4.
  const Plan second = make_plan("[*E]", parallel(6, 12, 2), o, d);
  CHECK(second.expert_node_load_factor == expert_load_factor(d, 6, shard_of(parallel(6, 12, 2)), o.routing, 2));
  // EP 4 inside a node: no RDMA copies, the rank's factor stands.
  const Plan inside = make_plan("[*E]", parallel(4, 4, 2), o, d);
  CHECK(inside.expert_node_load_factor == inside.expert_load_factor);
}

TEST_CASE("attention flops: projections, the causal score/value term, RoPE, norm and residual",
          "[schedule][costs]") {
  // q = 4*16 = 64, kv = 2*16 = 32; keys = (32+1)/2.
  const double t = 64, h = 64;
  const double proj = 2 * t * h * (64 + 64) + 2 * t * 64 * h;
  const double core = 4 * t * 16.5 * 4 * 16;
  const double rope = 3 * t * (64 + 32);  // q and k, all of each head rotated (rotary_percent 100)
  const double norm_residual = 5 * t * h;
  const SlotWork w = symbol_work('*', kTiny);
  CHECK(w.weight_gemm_flops == proj);
  CHECK(w.other_flops == core + rope + norm_residual);
  // The sliding window caps the keys: window 8 < 16.5.
  CHECK(symbol_work('W', kTiny).other_flops == 4 * t * 8 * 4 * 16 + rope + norm_residual);
}

TEST_CASE("the gradient all-reduce carries the stage's non-expert parameter bytes",
          "[schedule][costs]") {
  const Plan plan = make_plan("[*E][*E]", parallel(2, 2, 1), options(true, false));
  // embedding 128*64 + output 128*64+64 + 2 x (attention 64*128+64*64+64 + router/norm 64+64*8).
  const double params = 8192 + 8256 + 2 * (12352 + 576);
  int seen = 0;
  for (const Node& n : plan.nodes) {
    if (n.slot != Slot::GradAllReduce) continue;
    ++seen;
    CHECK(n.mem_bytes == params * 2);
    REQUIRE(n.sends.size() == 1);
    CHECK(n.sends[0].bytes == 2 * params * 2 / 2);
  }
  CHECK(seen == 2);
}

TEST_CASE("costs are split between stages: pre_process first, post_process last",
          "[schedule][costs]") {
  CHECK(phase_cost(embedding_work(kTiny), Phase::Forward, false).flops == 0);
  const double out = 2.0 * 64 * 64 * 128 + 5.0 * 64 * 128 + 4.0 * 64 * 64;
  CHECK(phase_cost(output_work(kTiny), Phase::Forward, false).flops == out);
}

TEST_CASE("the loss moves Megatron's bytes a logit: 52 unfused, fused one read and write of fp32",
          "[schedule][costs]") {
  // Counted from megatron/core/tensor_parallel/cross_entropy.py (costs.hpp): forward .float() 2 + 4,
  // max 4, subtract 8, exp 8, sum 4, divide 8; backward scale 8, cast to bf16 4 + 2.
  const double forward = (2 + 4) + 4 + 8 + 8 + 4 + 8, backward = 8 + (4 + 2);
  const double logits = kTiny.tokens() * kTiny.vocab;
  auto loss_bytes = [&](bool fused) {
    const SlotWork w = output_work(kTiny, {}, fused);
    const Kernel& loss = w.kernels.back();  // the loss is the output work's last kernel
    REQUIRE(loss.kind == KernelKind::Elementwise);
    CHECK(loss.flops == 5 * logits);
    return loss.bytes;
  };
  // The kernel model prices an elementwise backward at twice its forward: 1 + 2 passes.
  CHECK(3 * loss_bytes(false) / logits == Approx(forward + backward).epsilon(1e-12));
  CHECK(loss_bytes(true) == 8 * logits);
  // The same FLOPs either way: fusion changes traffic, not arithmetic.
  CHECK(phase_cost(output_work(kTiny, {}, false), Phase::Forward, false).flops ==
        phase_cost(output_work(kTiny, {}, true), Phase::Forward, false).flops);
}

TEST_CASE("routing skew loads the experts of low EP ranks and shrinks what they send",
          "[schedule][costs]") {
  ScheduleOptions o = options(true, false);
  o.routing_skew = 1.0;
  const Plan plan = make_plan("[*E]", parallel(2, 2, 1), o);
  double mlp[2] = {0, 0}, dispatch_out[2] = {0, 0};
  for (const Node& n : plan.nodes) {
    if (n.phase != Phase::Forward) continue;
    if (n.slot == Slot::Mlp) mlp[n.rank] = n.flops;
    if (n.slot == Slot::Dispatch) dispatch_out[n.rank] = n.sends.at(0).bytes;
  }
  // copies: rank 0 gets 2 x 64 x 2 x 2/3, rank 1 gets 2 x 64 x 2 x 1/3.
  CHECK(mlp[0] == Approx(2 * mlp[1]));
  CHECK(mlp[0] == Approx(6 * (256.0 * 2 / 3) * 64 * 32 + 3 * (256.0 * 2 / 3) * 32));
  CHECK(dispatch_out[0] == Approx(kPayload / 3));
  CHECK(dispatch_out[1] == Approx(kPayload * 2 / 3));
}
