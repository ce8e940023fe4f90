// Ranks as threads: streams, chains and the transport together -- a two-rank dispatch / expert /
// combine round trip, failure propagation across ranks, the measured timeline and the throttle's
// accounting inside a world.
#include <catch2/catch.hpp>

#include <ht/engine/runtime/cpu_world.hpp>
#include <ht/engine/runtime/event_chain.hpp>

#include <stdexcept>
#include <string>
#include <vector>

using namespace ht::engine::runtime;

TEST_CASE("two ranks: tokens dispatched to their expert's rank come back transformed",
          "[runtime][world]") {
  // Token t of rank r has value 10*r + t and goes to expert t % 2, owned by rank t % 2; expert e
  // multiplies by (e + 2). Combined back in the original order, token t becomes value * (t%2 + 2).
  CpuWorld world(2);
  auto ep = world.transport().create_group("ep0", {0, 1});
  std::vector<std::vector<float>> result(2);
  world.run([&](RankContext& ctx) {
    const int r = ctx.rank;
    EventChains chains([&] { return ctx.make_event(); });
    auto tokens = std::make_shared<std::vector<std::vector<float>>>(2);  // by destination rank
    auto received = std::make_shared<std::vector<std::vector<float>>>();
    auto returned = std::make_shared<std::vector<std::vector<float>>>();
    const ChainKey mb{0, 0};
    chains.issue(mb, ctx.compute, [=] {
      for (int t = 0; t < 5; ++t) (*tokens)[static_cast<std::size_t>(t % 2)].push_back(static_cast<float>(10 * r + t));
    }, {"pre_dispatch", "pre_dispatch", {}});
    chains.issue(mb, ctx.comm, [=, &ep] { *received = ep[static_cast<std::size_t>(r)]->all_to_all_v(*tokens, "dispatch"); },
                 {"dispatch", "dispatch", {}});
    chains.issue(mb, ctx.compute, [=] {
      for (auto& from : *received) {
        for (float& v : from) v *= static_cast<float>(r + 2);
      }
    }, {"mlp", "mlp", {}});
    chains.issue(mb, ctx.comm, [=, &ep] { *returned = ep[static_cast<std::size_t>(r)]->all_to_all_v(*received, "combine"); },
                 {"combine", "combine", {}});
    chains.issue(mb, ctx.compute, [=, &result] {
      std::vector<float> out;
      std::vector<std::size_t> next(2, 0);
      for (int t = 0; t < 5; ++t) {
        auto& from = (*returned)[static_cast<std::size_t>(t % 2)];
        out.push_back(from[next[static_cast<std::size_t>(t % 2)]++]);
      }
      result[static_cast<std::size_t>(r)] = out;
    });
  });
  for (int r = 0; r < 2; ++r) {
    std::vector<float> expected;
    for (int t = 0; t < 5; ++t) expected.push_back(static_cast<float>((10 * r + t) * (t % 2 + 2)));
    CHECK(result[static_cast<std::size_t>(r)] == expected);
  }
  // The measured timeline: two streams per rank, each labelled node a span on its stream.
  const auto tl = world.timeline();
  CHECK(tl.source == "engine");
  REQUIRE(tl.streams.size() == 4);
  CHECK(tl.streams[1].name == "comm");
  CHECK(tl.streams[1].role == ht::traces::Role::Comm);
  CHECK(tl.spans.size() == 8);  // 4 labelled nodes per rank
  for (const auto& s : tl.spans) {
    CHECK(s.stream == (s.category == "dispatch" || s.category == "combine" ? kCommStream : kComputeStream));
    CHECK(s.role == (s.stream == kCommStream ? ht::traces::Role::Comm : ht::traces::Role::Compute));
    CHECK(s.duration_s >= 0);
  }
  // One microbatch chain: its spans follow each other on one rank, whatever the stream.
  for (int r = 0; r < 2; ++r) {
    std::vector<ht::traces::Span> mine;
    for (const auto& s : tl.spans) {
      if (s.device == r) mine.push_back(s);
    }
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.start_s < b.start_s; });
    REQUIRE(mine.size() == 4);
    CHECK(mine[0].name == "pre_dispatch");
    CHECK(mine[1].name == "dispatch");
    CHECK(mine[2].name == "mlp");
    CHECK(mine[3].name == "combine");
    for (std::size_t i = 1; i < mine.size(); ++i) CHECK(mine[i - 1].end_s() <= mine[i].start_s);
  }
  CHECK(tl.metadata.at("ranks") == "2");
  CHECK(tl.metadata.at("link.throttle") == "off");
}

TEST_CASE("a failure on one rank surfaces from run() while the other rank's collective is released",
          "[runtime][world]") {
  CpuWorld world(2);
  auto dp = world.transport().create_group("dp", {0, 1});
  try {
    world.run([&](RankContext& ctx) {
      CpuEvent done;
      ctx.compute.enqueue([r = ctx.rank] {
        if (r == 1) throw std::runtime_error("rank 1: expert capacity exceeded");
      });
      done.record(ctx.compute);
      done.wait(ctx.comm);
      ctx.comm.enqueue([&dp, r = ctx.rank] {
        float g = 1;
        dp[static_cast<std::size_t>(r)]->all_reduce_sum(&g, 1, "grads");
      });
    });
    FAIL("expected run() to throw");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "rank 1: expert capacity exceeded");
  }
  CHECK(world.transport().aborted());
}

TEST_CASE("a throttled world records link traffic and its link model", "[runtime][world]") {
  CpuWorld world(2, LinkModel{1.0, 5.0});
  auto ep = world.transport().create_group("ep0", {0, 1});
  world.run([&](RankContext& ctx) {
    ctx.comm.enqueue([&ep, r = ctx.rank] {
      std::vector<std::vector<std::byte>> send(2);
      send[static_cast<std::size_t>(1 - r)].resize(static_cast<std::size_t>(1000 + 500 * r));
      send[static_cast<std::size_t>(r)].resize(64);  // to itself: a local copy, not link traffic
      auto got = ep[static_cast<std::size_t>(r)]->all_to_all_v(send, "dispatch");
      if (got[static_cast<std::size_t>(1 - r)].size() != static_cast<std::size_t>(1000 + 500 * (1 - r))) {
        throw std::runtime_error("wrong size");
      }
    }, {"dispatch", "dispatch", {}});
  });
  using std::chrono::nanoseconds;
  // Two collectives per call (counts: 8 bytes, then payload); each message 5000 ns + 1 ns/byte.
  CHECK(world.transport().link_stats(0) == LinkStats{2, 8 + 1000, nanoseconds(2 * 5000 + 8 + 1000)});
  CHECK(world.transport().link_stats(1) == LinkStats{2, 8 + 1500, nanoseconds(2 * 5000 + 8 + 1500)});
  const auto tl = world.timeline();
  CHECK(tl.metadata.at("link.bandwidth_gbps") == "1");
  CHECK(tl.metadata.at("link.latency_us") == "5");
  CHECK(tl.metadata.at("link.throttle") == "on");
  CHECK(tl.spans.size() == 2);
}
