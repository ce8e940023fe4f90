// The MoE physics of the twin's plans against independent closed forms and simulations written
// here: the expected load of the busiest EP rank (a router simulated with random numbers), the
// probability that a token reaches a rank or a node, the bytes each dispatcher puts on the wire,
// the permutation kernels' bytes, TP communication overlap's conservation of bytes, and the FP8
// linear layers with their quantization kernels.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <numeric>
#include <random>

#include <unistd.h>

#include "helpers.hpp"
#include "ht/schedule/costs.hpp"
#include "ht/schedule/expert_load_log.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

// Mean over `trials` of the busiest of `ep` ranks' loads over the mean, for `tokens` tokens each
// routed to top_k distinct experts of `experts`, each expert on rank e / (experts / ep); each
// expert's probability scaled by 1 + cv x N(0, 1) (a trained router's popularity; 0 = uniform).
double simulated_busiest(int tokens, int experts, int top_k, int ep, double cv, int trials, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  double sum = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<double> weight(static_cast<std::size_t>(experts));
    for (double& w : weight) w = std::max(1e-6, 1 + cv * normal(rng));
    std::vector<double> load(static_cast<std::size_t>(ep), 0);
    std::vector<int> order(static_cast<std::size_t>(experts));
    for (int t = 0; t < tokens; ++t) {
      // Weighted sampling without replacement of top_k experts (exponential keys).
      std::vector<std::pair<double, int>> keys;
      for (int e = 0; e < experts; ++e)
        keys.push_back({std::exponential_distribution<double>(weight[static_cast<std::size_t>(e)])(rng), e});
      std::partial_sort(keys.begin(), keys.begin() + top_k, keys.end());
      for (int i = 0; i < top_k; ++i) load[static_cast<std::size_t>(keys[static_cast<std::size_t>(i)].second / (experts / ep))] += 1;
    }
    const double mean = double(tokens) * top_k / ep;
    sum += *std::max_element(load.begin(), load.end()) / mean;
  }
  return sum / trials;
}

ModelDims moe_dims(int experts, int top_k, int tokens) {
  ModelDims d = tiny_model();
  d.num_experts = experts;
  d.top_k = top_k;
  d.micro_batch = 1;
  d.seq_len = tokens;
  return d;
}

}  // namespace

TEST_CASE("the expected maximum of n standard normals", "[schedule][moe]") {
  // Tabulated values (order statistics of the normal distribution).
  CHECK(expected_max_normal(1) == Approx(0).margin(1e-6));
  CHECK(expected_max_normal(2) == Approx(1 / std::sqrt(std::numbers::pi)).epsilon(1e-5));  // 0.5642
  CHECK(expected_max_normal(8) == Approx(1.4236).epsilon(1e-3));
  CHECK(expected_max_normal(32) == Approx(2.0697).epsilon(1e-3));
}

TEST_CASE("forced balance: the busiest EP rank's load matches a simulated uniform router", "[schedule][moe]") {
  // 64 experts, top-6, EP 8: each rank routes 512 tokens (4096 in the group per dispatch).
  const int ep = 8, tokens_per_rank = 512;
  const ModelDims d = moe_dims(64, 6, tokens_per_rank);
  const double model = expert_load_factor(d, ep, {}, Routing::ForceBalance);
  const double simulated = simulated_busiest(ep * tokens_per_rank, 64, 6, ep, 0, 300, 7);
  CHECK(model > 1.0);
  CHECK(model == Approx(simulated).epsilon(0.01));
  // physics.md 4's table (60 trials): 4096 tokens, 128 experts top-8, EP 32: 1.07 per EP rank.
  const double table = expert_load_factor(moe_dims(128, 8, 4096 / 32), 32, {}, Routing::ForceBalance);
  CHECK(table == Approx(1.07).margin(0.01));
  CHECK(expert_load_factor(d, ep, {}, Routing::Mean) == 1);
  CHECK(expert_load_factor(d, 1, {}, Routing::ForceBalance) == 1);
}

TEST_CASE("a loss-balanced router adds its expert popularity spread to the random floor", "[schedule][moe]") {
  const int ep = 8, tokens_per_rank = 512;
  const ModelDims d = moe_dims(64, 6, tokens_per_rank);
  const double model = expert_load_factor(d, ep, {}, Routing::AuxLoss);
  // The simulated router draws each expert's popularity with the model's coefficient of
  // variation; the busiest rank then carries both spreads.
  const double simulated = simulated_busiest(ep * tokens_per_rank, 64, 6, ep, kRouterPopularityCv, 300, 11);
  CHECK(model > expert_load_factor(d, ep, {}, Routing::ForceBalance));
  CHECK(model == Approx(simulated).epsilon(0.015));
}

TEST_CASE("a node's pooled experts: the busiest node's load matches a simulated router over nodes", "[schedule][moe]") {
  // EP 32, 4 experts a rank, 8 ranks a node: the busiest of 4 nodes of 16 experts each (the
  // simulated router's "ranks" are the nodes: expert e on unit e / 16).
  const int ep = 32, tokens_per_rank = 256;
  const ModelDims d = moe_dims(64, 6, tokens_per_rank);
  const double node = expert_load_factor(d, ep, {}, Routing::AuxLoss, 8);
  const double simulated = simulated_busiest(ep * tokens_per_rank, 64, 6, 4, kRouterPopularityCv, 300, 13);
  CHECK(node == Approx(simulated).epsilon(0.015));
  CHECK(node < expert_load_factor(d, ep, {}, Routing::AuxLoss));    // pooling evens the load out
  CHECK(expert_load_factor(d, ep, {}, Routing::AuxLoss, 32) == 1);  // one unit: nothing to wait for
}

TEST_CASE("a token reaches a rank or node holding m of E experts with 1 - C(E-m,k)/C(E,k)", "[schedule][moe]") {
  // E = 8, k = 2, m = 2: 1 - C(6,2)/C(8,2) = 1 - 15/28.
  CHECK(hit_probability(8, 2, 2) == Approx(1 - 15.0 / 28));
  CHECK(hit_probability(128, 8, 128) == 1);
  CHECK(hit_probability(128, 8, 0) == 0);
  // By simulation: 256 experts, top-8, 32 experts on a node.
  std::mt19937_64 rng(3);
  std::vector<int> e(256);
  std::iota(e.begin(), e.end(), 0);
  int hits = 0;
  const int trials = 200000;
  for (int t = 0; t < trials; ++t) {
    std::shuffle(e.begin(), e.end(), rng);
    hits += std::any_of(e.begin(), e.begin() + 8, [](int x) { return x < 32; });
  }
  CHECK(hit_probability(256, 8, 32) == Approx(double(hits) / trials).margin(0.004));
}

TEST_CASE("DeepEP sends one copy per destination rank in a node, one per destination node across nodes",
          "[schedule][moe]") {
  const ModelDims d = moe_dims(128, 8, 2048);
  const double token = 2048.0 * d.hidden * d.bytes_per_element;
  MoeRoute deepep;
  deepep.dispatcher = Dispatcher::DeepEP;
  deepep.gpus_per_node = 8;
  // EP 8 inside one node: 16 experts a rank; every peer gets each token with P(rank hit).
  std::vector<int> node{0, 1, 2, 3, 4, 5, 6, 7};
  const auto one = a2a_sends(d, node, 3, deepep, Slot::Dispatch, Phase::Forward);
  REQUIRE(one.size() == 7);
  for (const Transfer& t : one) CHECK(t.bytes == Approx(token * hit_probability(128, 8, 16)));
  // Against alltoall's top_k copies: fewer bytes, by P(hit) x ep / k.
  const auto a2a = a2a_sends(d, node, 3, MoeRoute{}, Slot::Dispatch, Phase::Forward);
  CHECK(a2a[0].bytes == Approx(token * 8 / 8));
  // EP 32 over 4 nodes: 4 experts a rank, 32 a node. Across: one RDMA copy per remote node to
  // the same position there; on the node: the direct copies plus the forwarding the receiving
  // nodes do for this rank's tokens (m - 1 ranks a node, each with P(rank hit)).
  std::vector<int> group(32);
  std::iota(group.begin(), group.end(), 0);
  const auto sends = a2a_sends(d, group, 2, deepep, Slot::Dispatch, Phase::Forward);
  const double p_rank = hit_probability(128, 8, 4), p_node = hit_probability(128, 8, 32);
  const double forwarded = 3 * token * 7 * p_rank;  // three remote nodes
  double intra = 0, inter = 0;
  for (const Transfer& t : sends) {
    if (t.peer / 8 == 0) {
      CHECK(t.bytes == Approx(token * p_rank + forwarded / 7));
      intra += t.bytes;
    } else if (t.bytes > 0) {
      CHECK(t.peer % 8 == 2);  // the same position on each remote node
      CHECK(t.bytes == Approx(token * p_node));
      inter += t.bytes;
    }
  }
  CHECK(inter == Approx(3 * token * p_node));
  CHECK(intra == Approx(7 * token * p_rank + forwarded));
  // The combine mirrors the dispatch.
  const auto back = a2a_sends(d, group, 2, deepep, Slot::Combine, Phase::Forward);
  for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i].bytes == Approx(sends[i].bytes));
}

TEST_CASE("the all-gather dispatcher sends every token to every peer and reduce-scatters in fp32",
          "[schedule][moe]") {
  const ModelDims d = moe_dims(16, 2, 256);
  MoeRoute ag;
  ag.dispatcher = Dispatcher::AllGather;
  const std::vector<int> group{0, 1, 2, 3};
  const double tokens_h = 256.0 * d.hidden;
  for (const Transfer& t : a2a_sends(d, group, 0, ag, Slot::Dispatch, Phase::Forward))
    CHECK(t.bytes == Approx(tokens_h * 2));
  for (const Transfer& t : a2a_sends(d, group, 0, ag, Slot::Combine, Phase::Forward))
    CHECK(t.bytes == Approx(tokens_h * 4));
}

TEST_CASE("the busiest rank's load scales its expert rows and what it receives", "[schedule][moe]") {
  const ModelDims d = moe_dims(8, 2, 64);
  MoeRoute busy;
  busy.load_factor = 1.25;
  CHECK(routed_copies(d, 4, 1, busy) == Approx(1.25 * routed_copies(d, 4, 1, MoeRoute{})));
  CHECK(a2a_bytes(d, 4, busy, Slot::Dispatch, Phase::Forward, 0, 1) ==
        Approx(1.25 * a2a_bytes(d, 4, MoeRoute{}, Slot::Dispatch, Phase::Forward, 0, 1)));
}

TEST_CASE("DeepEP's RDMA copies follow the busiest node's load, its NVLink copies the busiest rank's",
          "[schedule][moe]") {
  const ModelDims d = moe_dims(128, 8, 2048);
  MoeRoute even, busy;
  even.dispatcher = busy.dispatcher = Dispatcher::DeepEP;
  busy.load_factor = 1.25;
  busy.node_load_factor = 1.05;
  std::vector<int> group(32);
  std::iota(group.begin(), group.end(), 0);
  const auto base = a2a_sends(d, group, 2, even, Slot::Dispatch, Phase::Forward);
  const auto sends = a2a_sends(d, group, 2, busy, Slot::Dispatch, Phase::Forward);
  REQUIRE(sends.size() == base.size());
  int rdma = 0;
  for (std::size_t i = 0; i < sends.size(); ++i) {
    const bool remote = sends[i].peer / 8 != 0;
    rdma += remote && base[i].bytes > 0;
    CHECK(sends[i].bytes == Approx(base[i].bytes * (remote ? 1.05 : 1.25)));
  }
  CHECK(rdma == 3);
}

TEST_CASE("permutations move token rows: the dispatcher decides which and how many", "[schedule][moe]") {
  const ModelDims d = moe_dims(8, 2, 64);
  const double h = d.hidden, b = d.bytes_per_element, t = 64, k = 2;
  auto permuted = [](const SlotWork& w) {
    double bytes = 0;
    for (const Kernel& kn : w.kernels)
      if (kn.kind == KernelKind::Permute) bytes += kn.bytes;
    return bytes;
  };
  MoeRoute a2a, deepep;
  deepep.dispatcher = Dispatcher::DeepEP;
  // alltoall: T tokens into T k rows before the dispatch (read and write T k h).
  CHECK(permuted(moe_router_work(d, {}, a2a)) == Approx(2 * t * k * h * b));
  CHECK(permuted(moe_router_work(d, {}, deepep)) == 0);  // DeepEP gathers in its kernel
  // Experts of a rank holding 2 of them with `copies` rows: alltoall sorts by expert and back
  // (2 x 2 copies h) and unpermutes T k rows into T tokens; DeepEP permutes and unpermutes.
  const double copies = 128;
  CHECK(permuted(expert_work(d, copies, 2, {}, a2a)) == Approx(4 * copies * h * b + (t * k + t) * h * b));
  CHECK(permuted(expert_work(d, copies, 1, {}, a2a)) == Approx((t * k + t) * h * b));  // one expert: no sort
  CHECK(permuted(expert_work(d, copies, 2, {}, deepep)) == Approx(4 * copies * h * b));
}

TEST_CASE("TP communication overlap moves the same bytes, with only the last chunk of each reduce-scatter apart",
          "[schedule][moe]") {
  ModelDims d = tiny_model();
  ParallelConfig c = parallel(1, 2, 2);
  c.tp = 2;
  c.dp = 1;
  ScheduleOptions off = options(false, false), on = off;
  on.tp_comm_overlap = true;
  const Plan a = make_plan("*-", c, off, d), b = make_plan("*-", c, on, d);
  auto tp_bytes = [](const Plan& p, Part part, bool compute_main) {
    double bytes = 0;
    for (const Node& n : p.nodes) {
      if (n.rank != 0 || n.collective < 0 || p.collectives[static_cast<std::size_t>(n.collective)].group != Group::Tp) continue;
      if (n.slot == Slot::PreProcess || n.slot == Slot::PostProcess) continue;
      if (compute_main ? n.part == Part::Main : n.part == part)
        for (const Transfer& t : n.sends) bytes += t.bytes;
    }
    return bytes;
  };
  const double gathers = tp_bytes(a, Part::TpGather, false), scatters = tp_bytes(a, Part::TpScatter, false);
  const double regathers = tp_bytes(a, Part::Main, true);  // the backward's re-gather of the input
  CHECK(gathers > 0);
  CHECK(tp_bytes(b, Part::TpGather, false) == 0);  // every gather rides on its block's node
  CHECK(tp_bytes(b, Part::TpScatter, false) == Approx(scatters / 4));
  CHECK(tp_bytes(b, Part::Main, true) == Approx(gathers + regathers + scatters * 3 / 4));
}

TEST_CASE("FP8 runs the linear layers in FP8 after a quantizing cast; router and output stay bf16",
          "[schedule][moe]") {
  std::vector<Kernel> k{{KernelKind::Gemm, true, 4096, 1024, 2048, 1, 0, 0},
                        {KernelKind::Gemm, false, 4096, 128, 2048, 1, 0, 0},  // router: not delayable
                        {KernelKind::GroupedGemm, true, 256, 1024, 2048, 4, 0, 0}};
  CHECK(with_precision(k, Precision::Bf16) == k);
  const auto q = with_precision(k, Precision::Fp8);
  REQUIRE(q.size() == 5);
  CHECK(q[0].kind == KernelKind::Elementwise);
  CHECK(q[0].bytes == 4 * 4096.0 * 2048);  // read bf16, write FP8 row- and column-wise
  CHECK(q[1].fp8);
  CHECK_FALSE(q[2].fp8);
  CHECK(q[3].bytes == 4 * 256.0 * 4 * 2048);
  CHECK(q[4].fp8);
}

TEST_CASE("group-limited routing: a group is reached through its chosen share, several groups through each",
          "[schedule][moe]") {
  // DeepSeek-V3: 256 experts in 8 groups of 32, a token's 8 experts from its 4 best groups.
  ModelDims d = moe_dims(256, 8, 4096);
  d.router_groups = 8;
  d.router_group_topk = 4;
  // By simulation: 4 of 8 groups uniformly, then 8 of their 128 experts uniformly.
  std::mt19937_64 rng(5);
  std::vector<int> groups(8), experts(128);
  std::iota(groups.begin(), groups.end(), 0);
  std::iota(experts.begin(), experts.end(), 0);
  const int trials = 100000;
  int node_hits = 0, two_node_hits = 0, rank_hits = 0;
  for (int t = 0; t < trials; ++t) {
    std::shuffle(groups.begin(), groups.end(), rng);
    std::shuffle(experts.begin(), experts.end(), rng);
    bool in0 = false, in01 = false, rank = false;
    for (int i = 0; i < 8; ++i) {
      const int g = groups[static_cast<std::size_t>(experts[static_cast<std::size_t>(i)] / 32)];  // its group
      const int e = experts[static_cast<std::size_t>(i)] % 32;                                     // within it
      in0 = in0 || g == 0;
      in01 = in01 || g <= 1;
      rank = rank || (g == 0 && e < 4);
    }
    node_hits += in0;
    two_node_hits += in01;
    rank_hits += rank;
  }
  CHECK(hit_probability(d, 32) == Approx(double(node_hits) / trials).margin(0.005));
  CHECK(hit_probability(d, 64) == Approx(double(two_node_hits) / trials).margin(0.005));
  CHECK(hit_probability(d, 4) == Approx(double(rank_hits) / trials).margin(0.004));
  // Fewer nodes than without groups: DeepEP's RDMA copies per token drop.
  CHECK(hit_probability(d, 32) < hit_probability(256, 8, 32));
}

// Megatron's tokens-per-expert log read by hand: EP 2 over 4 ranks, one layer, two forwards.
// Group {0, 1}: rows 4 | 2, then 2 | 4: the busiest rank carries 4 + 4 where the mean is 3 + 3.
// Group {2, 3}: 4 | 4, then no row at all (left out). The slowest group's figure is 8 / 6.
TEST_CASE("expert-load log: the slowest EP group's busiest-rank rows over the mean, by hand", "[moe]") {
  const auto dir = std::filesystem::temp_directory_path() / ("ht-tpe-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "tokens_per_expert");
  const char* lines[4] = {R"({"iter": 5, "block": "decoder", "layer": 0, "tpe": [[3, 1], [1, 1]]})",
                          R"({"iter": 5, "block": "decoder", "layer": 0, "tpe": [[1, 1], [2, 2]]})",
                          R"({"iter": 5, "block": "decoder", "layer": 0, "tpe": [[2, 2], [0, 0]]})",
                          R"({"iter": 5, "block": "decoder", "layer": 0, "tpe": [[2, 2], [0, 0]]})"};
  for (int r = 0; r < 4; ++r) {
    std::ofstream f(dir / "tokens_per_expert" / ("rank" + std::to_string(r) + ".jsonl"));
    f << lines[r] << "\n";
  }
  const ExpertLoadReport report = read_expert_load_log({dir}, 2, 1, 4);
  std::filesystem::remove_all(dir);
  CHECK(report.groups == 2);
  CHECK(report.local_experts == 2);
  CHECK(report.records == 3);
  CHECK(report.empty_records == 1);
  REQUIRE(report.iterations.size() == 1);
  CHECK(report.iterations[0].slowest_group_rank == 0);
  CHECK(report.factor == Approx(8.0 / 6.0).epsilon(1e-15));
  CHECK(report.median_ratio == Approx(4.0 / 3.0).epsilon(1e-15));
  CHECK(report.max_ratio == Approx(4.0 / 3.0).epsilon(1e-15));
  REQUIRE(report.layers.size() == 1);
  CHECK(report.layers[0].mean_ratio == Approx((4.0 / 3 + 4.0 / 3 + 1.0) / 3).epsilon(1e-15));
  CHECK_THROWS_WITH(read_expert_load_log({dir}, 2, 1), Catch::Contains("no such file or folder"));
}
