// In-process transport: all-to-all-v delivery, the fixed-order deterministic all-reduce,
// point-to-point, traffic accounting, and errors instead of hangs (mismatch, timeout, abort).
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <ht/engine/runtime/error.hpp>
#include <ht/engine/runtime/inproc_transport.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include "runtime_test_support.hpp"

using namespace ht::engine::runtime;
using ht::engine::runtime::test::run_ranks;

namespace {
std::vector<int> iota_ranks(int n) {
  std::vector<int> r(static_cast<std::size_t>(n));
  std::iota(r.begin(), r.end(), 0);
  return r;
}

void rethrow_first(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Every rank must have failed with `code`; returns the messages.
std::vector<std::string> require_all_failed(const std::vector<std::exception_ptr>& errors,
                                            ErrorCode code) {
  std::vector<std::string> messages;
  for (const auto& e : errors) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (const RuntimeError& err) {
      CHECK(to_string(err.code()) == to_string(code));
      messages.emplace_back(err.what());
    }
  }
  return messages;
}

std::uint32_t payload(int src, int dst, std::size_t i) {
  return static_cast<std::uint32_t>((src * 64 + dst) * 100000 + static_cast<int>(i));
}
}  // namespace

TEST_CASE("all_to_all_v moves each member's bytes to the right peer for random counts",
          "[runtime][transport][property]") {
  rc::prop("explicit sizes", [] {
    const int n = *rc::gen::inRange(1, 7);
    const auto counts = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n * n),
                                                               rc::gen::inRange(0, 40));
    auto count = [&](int s, int d) { return static_cast<std::size_t>(counts[static_cast<std::size_t>(s * n + d)]); };
    InProcTransport t(n);
    auto comms = t.create_group("ep", iota_ranks(n));
    using Buffers = std::vector<std::vector<std::uint32_t>>;
    std::vector<Buffers> send(static_cast<std::size_t>(n)), recv(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) {
      for (int d = 0; d < n; ++d) {
        std::vector<std::uint32_t> out(count(s, d));
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = payload(s, d, i);
        send[static_cast<std::size_t>(s)].push_back(out);
        recv[static_cast<std::size_t>(s)].emplace_back(count(d, s), 0xdeadbeefu);
      }
    }
    rethrow_first(run_ranks(n, [&](int r) {
      std::vector<std::span<const std::uint32_t>> s;
      std::vector<std::span<std::uint32_t>> rr;
      for (int p = 0; p < n; ++p) {
        s.emplace_back(send[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)]);
        rr.emplace_back(recv[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)]);
      }
      comms[static_cast<std::size_t>(r)]->all_to_all_v<std::uint32_t>(s, rr, "dispatch");
    }));
    for (int d = 0; d < n; ++d) {
      for (int s = 0; s < n; ++s) {
        const auto& got = recv[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)];
        RC_ASSERT(got.size() == count(s, d));
        for (std::size_t i = 0; i < got.size(); ++i) RC_ASSERT(got[i] == payload(s, d, i));
      }
    }
    // Accounting: self messages and empty messages are not sent over the link.
    for (int s = 0; s < n; ++s) {
      LinkStats expected;
      for (int d = 0; d < n; ++d) {
        if (d == s || count(s, d) == 0) continue;
        expected.messages += 1;
        expected.bytes += count(s, d) * sizeof(std::uint32_t);
      }
      RC_ASSERT(t.link_stats(s) == expected);  // throttle off: busy stays 0
    }
  });
}

TEST_CASE("all_to_all_v with unknown receive sizes exchanges counts first",
          "[runtime][transport][property]") {
  rc::prop("vector form", [] {
    const int n = *rc::gen::inRange(1, 7);
    const auto counts = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n * n),
                                                               rc::gen::inRange(0, 25));
    InProcTransport t(n);
    auto comms = t.create_group("ep", iota_ranks(n));
    std::vector<std::vector<std::vector<std::uint32_t>>> got(static_cast<std::size_t>(n));
    rethrow_first(run_ranks(n, [&](int r) {
      std::vector<std::vector<std::uint32_t>> send(static_cast<std::size_t>(n));
      for (int d = 0; d < n; ++d) {
        const auto c = static_cast<std::size_t>(counts[static_cast<std::size_t>(r * n + d)]);
        for (std::size_t i = 0; i < c; ++i) send[static_cast<std::size_t>(d)].push_back(payload(r, d, i));
      }
      got[static_cast<std::size_t>(r)] = comms[static_cast<std::size_t>(r)]->all_to_all_v(send, "tokens");
    }));
    for (int d = 0; d < n; ++d) {
      for (int s = 0; s < n; ++s) {
        const auto& v = got[static_cast<std::size_t>(d)][static_cast<std::size_t>(s)];
        RC_ASSERT(v.size() == static_cast<std::size_t>(counts[static_cast<std::size_t>(s * n + d)]));
        for (std::size_t i = 0; i < v.size(); ++i) RC_ASSERT(v[i] == payload(s, d, i));
      }
    }
  });
}

TEST_CASE("all_reduce_sum equals the left-to-right float sum in member order, bit for bit",
          "[runtime][transport][property]") {
  rc::prop("random floats", [] {
    const int n = *rc::gen::inRange(1, 7);
    const auto count = static_cast<std::size_t>(*rc::gen::inRange(0, 64));
    // Finite floats over many binades, so that the summation order changes the bits.
    auto gen_float = rc::gen::apply(
        [](int mantissa, int exponent) { return std::ldexp(static_cast<float>(mantissa), exponent); },
        rc::gen::inRange(-(1 << 23), 1 << 23), rc::gen::inRange(-40, 10));
    std::vector<std::vector<float>> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = *rc::gen::container<std::vector<float>>(count, gen_float);
    std::vector<float> expected = x[0];
    for (int k = 1; k < n; ++k) {
      for (std::size_t i = 0; i < count; ++i) expected[i] += x[static_cast<std::size_t>(k)][i];
    }
    InProcTransport t(n);
    auto comms = t.create_group("dp", iota_ranks(n));
    auto data = x;
    rethrow_first(run_ranks(n, [&](int r) {
      auto& v = data[static_cast<std::size_t>(r)];
      comms[static_cast<std::size_t>(r)]->all_reduce_sum(v.data(), v.size(), "grads");
    }));
    for (int r = 0; r < n; ++r) {
      for (std::size_t i = 0; i < count; ++i) {
        RC_ASSERT(std::bit_cast<std::uint32_t>(data[static_cast<std::size_t>(r)][i]) ==
                  std::bit_cast<std::uint32_t>(expected[i]));
      }
    }
  });
}

TEST_CASE("all_reduce_sum adds in member order 0..n-1 (hand case where order changes the bits)",
          "[runtime][transport]") {
  // ((1 + 1e8) + -1e8) = 0 in float32 (1e8 + 1 rounds to 1e8); any order that adds the two large
  // values first gives 1. The -0.0 member checks that the sum starts from x_0, not from +0.0.
  InProcTransport t(3);
  auto comms = t.create_group("dp", {0, 1, 2});
  std::vector<std::vector<float>> data{{1.0f, -0.0f}, {1e8f, -0.0f}, {-1e8f, -0.0f}};
  rethrow_first(run_ranks(3, [&](int r) {
    comms[static_cast<std::size_t>(r)]->all_reduce_sum(data[static_cast<std::size_t>(r)].data(), 2, "grads");
  }));
  for (const auto& v : data) {
    CHECK(std::bit_cast<std::uint32_t>(v[0]) == std::bit_cast<std::uint32_t>(0.0f));
    CHECK(std::bit_cast<std::uint32_t>(v[1]) == std::bit_cast<std::uint32_t>(-0.0f));
  }
}

TEST_CASE("group members map to global ranks; groups of a subset do not involve the others",
          "[runtime][transport]") {
  InProcTransport t(4);
  auto ep = t.create_group("ep1", {3, 1});
  CHECK(ep[0]->rank() == 0);
  CHECK(ep[1]->global_rank(0) == 3);
  CHECK(ep[0]->name() == "ep1");
  std::vector<float> a{1, 2}, b{10, 20};
  rethrow_first(run_ranks(2, [&](int m) {
    auto& v = m == 0 ? a : b;
    ep[static_cast<std::size_t>(m)]->all_reduce_sum(v.data(), v.size(), "expert grads");
  }));
  CHECK(a == std::vector<float>{11, 22});
  CHECK(b == std::vector<float>{11, 22});
  // Traffic is charged to the global ranks: chunk 0 is {x[0]}, chunk 1 is {x[1]}; each member sends
  // its part of the peer's chunk, then its own reduced chunk: 4 + 4 bytes in 2 messages.
  CHECK(t.link_stats(3) == LinkStats{2, 8, {}});
  CHECK(t.link_stats(1) == LinkStats{2, 8, {}});
  CHECK(t.link_stats(0) == LinkStats{});
  CHECK_THROWS_AS(t.create_group("bad", {0, 0}), RuntimeError);
  CHECK_THROWS_AS(t.create_group("bad", {4}), RuntimeError);
  CHECK_THROWS_AS(t.create_group("bad", {}), RuntimeError);
}

TEST_CASE("all_reduce_sum charges the traffic of a direct reduce-scatter + all-gather",
          "[runtime][transport]") {
  // 10 floats over 3 members: chunks of 4, 3, 3 floats (16, 12, 12 bytes). Member m sends peer p
  // chunk p, then chunk m. Member 0: 12 + 12 + 16 + 16 = 56 bytes; members 1, 2: 16+12+12+12 = 52.
  InProcTransport t(3, TransportOptions{LinkModel{1.0, 0.001}, kDefaultDeadlockTimeout});
  auto comms = t.create_group("dp", {0, 1, 2});
  std::vector<std::vector<float>> data(3, std::vector<float>(10, 1.0f));
  rethrow_first(run_ranks(3, [&](int r) {
    comms[static_cast<std::size_t>(r)]->all_reduce_sum(data[static_cast<std::size_t>(r)].data(), 10, "grads");
  }));
  using std::chrono::nanoseconds;
  // busy = messages * 1 ns latency + bytes * 1 ns/byte at 1 GB/s.
  CHECK(t.link_stats(0) == LinkStats{4, 56, nanoseconds(4 + 56)});
  CHECK(t.link_stats(1) == LinkStats{4, 52, nanoseconds(4 + 52)});
  CHECK(t.link_stats(2) == LinkStats{4, 52, nanoseconds(4 + 52)});
  for (const auto& v : data) CHECK(v == std::vector<float>(10, 3.0f));
}

TEST_CASE("mismatched all_to_all_v sizes make every member throw SizeMismatch",
          "[runtime][transport]") {
  InProcTransport t(2);
  auto comms = t.create_group("ep0", {0, 1});
  std::vector<float> out(3, 1.0f), in(3);
  auto errors = run_ranks(2, [&](int r) {
    // member 0 sends 3 floats to member 1, which expects 2.
    std::vector<std::span<const float>> s{std::span<const float>(), std::span<const float>(out)};
    std::vector<std::span<float>> rr{std::span<float>(), std::span<float>()};
    if (r == 1) {
      s = {std::span<const float>(), std::span<const float>()};
      rr = {std::span<float>(in.data(), 2), std::span<float>()};
    }
    comms[static_cast<std::size_t>(r)]->all_to_all_v<float>(s, rr, "F mb0 L1 dispatch");
  });
  for (const auto& m : require_all_failed(errors, ErrorCode::SizeMismatch)) {
    CHECK(m == "group 'ep0': all_to_all_v 'F mb0 L1 dispatch': member 0 sends 12 bytes to "
               "member 1, which expects 8 bytes");
  }
  // The failure was agreed by all members, so the group stays usable.
  std::vector<std::vector<float>> v{{1}, {2}};
  rethrow_first(run_ranks(2, [&](int r) {
    comms[static_cast<std::size_t>(r)]->all_reduce_sum(v[static_cast<std::size_t>(r)].data(), 1, "after");
  }));
  CHECK(v[0][0] == 3.0f);
}

TEST_CASE("mismatched all_reduce_sum counts make every member throw SizeMismatch",
          "[runtime][transport]") {
  InProcTransport t(3);
  auto comms = t.create_group("dp", {0, 1, 2});
  std::vector<float> buf(8, 1.0f);
  std::vector<std::vector<float>> bufs(3, buf);
  auto errors = run_ranks(3, [&](int r) {
    comms[static_cast<std::size_t>(r)]->all_reduce_sum(bufs[static_cast<std::size_t>(r)].data(), r == 2 ? 7 : 8, "grads");
  });
  require_all_failed(errors, ErrorCode::SizeMismatch);
  for (const auto& b : bufs) CHECK(b == buf);  // nothing written on failure
}

TEST_CASE("different collectives at the same position make every member throw",
          "[runtime][transport]") {
  InProcTransport t(2);
  auto comms = t.create_group("ep0", {0, 1});
  auto errors = run_ranks(2, [&](int r) {
    if (r == 0) {
      float x = 1;
      comms[0]->all_reduce_sum(&x, 1, "grads");
    } else {
      std::vector<std::vector<float>> send(2);
      comms[1]->all_to_all_v(send, "combine");
    }
  });
  require_all_failed(errors, ErrorCode::CollectiveMismatch);
}

TEST_CASE("a wrong number of peer buffers on one member fails every member",
          "[runtime][transport]") {
  InProcTransport t(2);
  auto comms = t.create_group("ep0", {0, 1});
  auto errors = run_ranks(2, [&](int r) {
    std::vector<ConstBytes> s(r == 0 ? 1 : 2);
    std::vector<MutableBytes> rr(2);
    comms[static_cast<std::size_t>(r)]->all_to_all_v_bytes(s, rr, "dispatch");
  });
  require_all_failed(errors, ErrorCode::InvalidArgument);
}

TEST_CASE("a member that never arrives is reported by name after the timeout, not a hang",
          "[runtime][transport]") {
  InProcTransport t(3, TransportOptions{LinkModel{}, std::chrono::milliseconds(100)});
  auto comms = t.create_group("ep0", {0, 1, 2});
  auto errors = run_ranks(2, [&](int r) {  // member 2 never calls
    float x = 1;
    comms[static_cast<std::size_t>(r)]->all_reduce_sum(&x, 1, "B mb3 grads");
  });
  for (const auto& m : require_all_failed(errors, ErrorCode::Timeout)) {
    CHECK_THAT(m, Catch::Contains("all_reduce_sum 'B mb3 grads'"));
    CHECK_THAT(m, Catch::Contains("member(s) 2 (rank 2)"));
  }
  // The group is broken now: the late member is told so at once instead of waiting.
  float y = 1;
  try {
    comms[2]->all_reduce_sum(&y, 1, "late");
    FAIL("expected Aborted");
  } catch (const RuntimeError& e) {
    CHECK(e.code() == ErrorCode::Aborted);
  }
}

TEST_CASE("abort releases a member waiting in a collective", "[runtime][transport]") {
  InProcTransport t(2);
  auto comms = t.create_group("dp", {0, 1});
  std::exception_ptr error;
  std::thread waiter([&] {
    try {
      float x = 1;
      comms[0]->all_reduce_sum(&x, 1, "grads");
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.abort("rank 1 compute stream failed: boom");
  waiter.join();
  REQUIRE(error);
  REQUIRE_THROWS_WITH(std::rethrow_exception(error), Catch::Contains("rank 1 compute stream failed: boom"));
  CHECK(t.aborted());
  auto late = t.create_group("pp", {0, 1});  // groups created later are born aborted
  float z = 0;
  CHECK_THROWS_AS(late[0]->recv(1, 0, std::span<float>(&z, 1)), RuntimeError);
}

TEST_CASE("point-to-point keeps per-tag FIFO order and checks sizes", "[runtime][transport]") {
  InProcTransport t(2);
  auto pp = t.create_group("pp 0->1", {0, 1});
  const std::vector<int> a{1, 2, 3}, b{4, 5}, c{6};
  // Buffered sends: all complete before any receive is posted.
  pp[0]->send<int>(1, 7, a, "F mb0 act");
  pp[0]->send<int>(1, 9, c, "B mb0 grad");
  pp[0]->send<int>(1, 7, b, "F mb1 act");
  std::vector<int> got_c(1), got_a(3), got_b(2);
  pp[1]->recv<int>(0, 9, got_c);  // another tag first: tags are independent queues
  pp[1]->recv<int>(0, 7, got_a);
  pp[1]->recv<int>(0, 7, got_b);
  CHECK(got_a == a);
  CHECK(got_b == b);
  CHECK(got_c == c);
  CHECK(t.link_stats(0) == LinkStats{3, 24, {}});

  pp[0]->send<int>(1, 1, a);
  std::vector<int> wrong(2);
  try {
    pp[1]->recv<int>(0, 1, wrong, "F mb2 act");
    FAIL("expected SizeMismatch");
  } catch (const RuntimeError& e) {
    CHECK(e.code() == ErrorCode::SizeMismatch);
    CHECK(std::string(e.what()) ==
          "group 'pp 0->1': recv 'F mb2 act' from member 0 tag 1: expected 8 bytes, the message has 12");
  }
  CHECK_THROWS_AS(pp[0]->send<int>(2, 0, a), RuntimeError);
}

TEST_CASE("a receive without a matching send times out with its name", "[runtime][transport]") {
  InProcTransport t(2, TransportOptions{LinkModel{}, std::chrono::milliseconds(50)});
  auto pp = t.create_group("pp", {0, 1});
  std::vector<float> buf(4);
  try {
    pp[1]->recv<float>(0, 3, buf, "F mb0 act");
    FAIL("expected Timeout");
  } catch (const RuntimeError& e) {
    CHECK(e.code() == ErrorCode::Timeout);
    CHECK_THAT(e.what(), Catch::Contains("recv 'F mb0 act' from member 0 tag 3"));
  }
}

TEST_CASE("transport options are validated", "[runtime][transport]") {
  CHECK_THROWS_AS(InProcTransport(0), RuntimeError);
  CHECK_THROWS_AS(InProcTransport(2, TransportOptions{LinkModel{-1.0, 0}, kDefaultDeadlockTimeout}), RuntimeError);
  CHECK_THROWS_AS(InProcTransport(2, TransportOptions{LinkModel{}, std::chrono::milliseconds(0)}), RuntimeError);
}

TEST_CASE("ranks issuing the same sequence of collectives on overlapping groups never deadlock",
          "[runtime][transport][property]") {
  rc::prop("random op sequences over EP pairs and one DP group", [] {
    const auto length = static_cast<std::size_t>(*rc::gen::inRange(0, 16));
    const auto ops = *rc::gen::container<std::vector<int>>(length, rc::gen::inRange(0, 3));
    InProcTransport t(4, TransportOptions{LinkModel{}, std::chrono::seconds(20)});
    std::vector<std::unique_ptr<Communicator>> ep;  // member of {0,1} or {2,3}, by global rank
    for (auto& c : t.create_group("ep0", {0, 1})) ep.push_back(std::move(c));
    for (auto& c : t.create_group("ep1", {2, 3})) ep.push_back(std::move(c));
    auto dp = t.create_group("dp", {0, 1, 2, 3});
    auto pp = t.create_group("pp", {1, 2});
    rethrow_first(run_ranks(4, [&](int r) {
      auto& e = *ep[static_cast<std::size_t>(r)];
      for (std::size_t step = 0; step < ops.size(); ++step) {
        const auto st = static_cast<int>(step);
        if (ops[step] == 0) {  // EP all-to-all: each sends its global rank and step to the peer
          std::vector<std::vector<int>> send(2);
          send[static_cast<std::size_t>(1 - e.rank())] = {r, st};
          const auto got = e.all_to_all_v(send, "dispatch");
          const int peer = e.global_rank(1 - e.rank());
          if (got[static_cast<std::size_t>(1 - e.rank())] != std::vector<int>{peer, st}) {
            throw std::runtime_error("wrong all-to-all payload");
          }
        } else if (ops[step] == 1) {  // DP all-reduce of (rank + step): 0+1+2+3 + 4*step
          float x = static_cast<float>(r + st);
          dp[static_cast<std::size_t>(r)]->all_reduce_sum(&x, 1, "grads");
          if (x != static_cast<float>(6 + 4 * st)) throw std::runtime_error("wrong all-reduce sum");
        } else if (r == 1 || r == 2) {  // pipeline pair: 1 sends, 2 receives (buffered)
          auto& p = *pp[static_cast<std::size_t>(r - 1)];
          std::vector<int> v{st};
          if (r == 1) {
            p.send<int>(1, st, v);
          } else {
            std::vector<int> in(1);
            p.recv<int>(0, st, in);
            if (in != v) throw std::runtime_error("wrong p2p payload");
          }
        }
      }
    }));
  });
}
