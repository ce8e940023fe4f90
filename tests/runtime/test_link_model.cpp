// The throttle's pure link model: durations and the egress-serialised schedule, against
// hand-computed nanoseconds (1 GB/s moves one byte per nanosecond).
#include <catch2/catch.hpp>

#include <ht/engine/runtime/error.hpp>
#include <ht/engine/runtime/link_model.hpp>

#include <cmath>
#include <limits>

using namespace ht::engine::runtime;
using std::chrono::nanoseconds;

TEST_CASE("a message occupies the link for latency + bytes / bandwidth", "[runtime][link]") {
  const LinkModel m{2.0, 1.5};
  CHECK(m.enabled());
  CHECK(m.duration(3000) == nanoseconds(1500 + 1500));
  CHECK(m.duration(0) == nanoseconds(1500));
  CHECK(LinkModel{}.duration(1 << 20) == nanoseconds(0));
  CHECK_FALSE(LinkModel{}.enabled());
  CHECK(LinkModel{0, 3}.duration(1 << 20) == nanoseconds(3000));  // latency-only model
  CHECK(LinkModel{0.5, 0}.duration(10) == nanoseconds(20));
}

TEST_CASE("the link model rejects negative and non-finite parameters", "[runtime][link]") {
  CHECK_THROWS_AS((LinkModel{-1, 0}.validate()), RuntimeError);
  CHECK_THROWS_AS((LinkModel{0, -1}.validate()), RuntimeError);
  CHECK_THROWS_AS((LinkModel{std::numeric_limits<double>::quiet_NaN(), 0}.validate()), RuntimeError);
  CHECK_THROWS_AS((LinkModel{std::numeric_limits<double>::infinity(), 0}.validate()), RuntimeError);
  CHECK_NOTHROW(LinkModel{}.validate());
}

TEST_CASE("the link parameters go into timeline metadata", "[runtime][link]") {
  std::map<std::string, std::string> md;
  LinkModel{12.5, 3}.write_metadata(md);
  CHECK(md.at("link.bandwidth_gbps") == "12.5");
  CHECK(md.at("link.latency_us") == "3");
  CHECK(md.at("link.throttle") == "on");
  LinkModel{}.write_metadata(md);
  CHECK(md.at("link.throttle") == "off");
}

TEST_CASE("two-phase schedule: egress serialised per rank, next phase after all arrivals",
          "[runtime][link]") {
  const LinkModel m{1.0, 0.01};  // 10 ns latency, 1 ns per byte
  std::vector<nanoseconds> link_free(3, nanoseconds(0));
  const std::vector<std::vector<LinkMessage>> phases{
      {{0, 1, 100}, {0, 2, 20}, {1, 2, 10}, {2, 2, 999}, {1, 0, 0}},  // self and empty: not sent
      {{2, 0, 40}, {1, 0, 5}},
  };
  const auto r = schedule_links(m, nanoseconds(0), link_free, phases);
  // Phase 1: 0->1 [0,110], 0->2 [110,140], 1->2 [0,20].
  //   ready: rank 0 = 140 (own sends), rank 1 = 110 (arrival from 0), rank 2 = 140 (from 0).
  // Phase 2: 2->0 [140,190], 1->0 starts at max(110, link free 20) = 110, ends 125.
  CHECK(r.finish == std::vector<nanoseconds>{nanoseconds(190), nanoseconds(125), nanoseconds(190)});
  CHECK(link_free == std::vector<nanoseconds>{nanoseconds(140), nanoseconds(125), nanoseconds(190)});
  CHECK(r.sent[0] == LinkStats{2, 120, nanoseconds(140)});
  CHECK(r.sent[1] == LinkStats{2, 15, nanoseconds(35)});
  CHECK(r.sent[2] == LinkStats{1, 40, nanoseconds(50)});
}

TEST_CASE("a link still busy from earlier traffic delays the next message", "[runtime][link]") {
  const LinkModel m{1.0, 0.01};
  std::vector<nanoseconds> link_free{nanoseconds(500), nanoseconds(0)};
  const auto r = schedule_links(m, nanoseconds(100), link_free, {{{0, 1, 10}}});
  CHECK(r.finish == std::vector<nanoseconds>{nanoseconds(520), nanoseconds(520)});
}

TEST_CASE("with the throttle off everything finishes at the start, traffic is still counted",
          "[runtime][link]") {
  std::vector<nanoseconds> link_free(2, nanoseconds(0));
  const auto r = schedule_links(LinkModel{}, nanoseconds(7), link_free, {{{0, 1, 64}, {1, 0, 32}}});
  CHECK(r.finish == std::vector<nanoseconds>{nanoseconds(7), nanoseconds(7)});
  CHECK(r.sent[0] == LinkStats{1, 64, nanoseconds(0)});
  CHECK(r.sent[1] == LinkStats{1, 32, nanoseconds(0)});
}

TEST_CASE("a message naming a rank outside the schedule is rejected", "[runtime][link]") {
  std::vector<nanoseconds> link_free(2, nanoseconds(0));
  CHECK_THROWS_AS(schedule_links(LinkModel{}, nanoseconds(0), link_free, {{{0, 2, 1}}}), RuntimeError);
}
