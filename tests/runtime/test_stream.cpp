// CPU streams and events: in-order execution, failures surfacing at synchronize, and CUDA event
// semantics (record captures the work so far; wait orders later work behind it).
#include <catch2/catch.hpp>

#include <ht/engine/runtime/cpu_stream.hpp>
#include <ht/engine/runtime/error.hpp>

#include <atomic>
#include <condition_variable>
#include <stdexcept>
#include <vector>

#include "runtime_test_support.hpp"

using namespace ht::engine::runtime;
using ht::engine::runtime::test::OpLog;

namespace {
// A gate a work item can block on until the test opens it (bounded, so a bug cannot hang).
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void release() {
    {
      std::lock_guard l(m);
      open = true;
    }
    cv.notify_all();
  }
  void pass() {
    std::unique_lock l(m);
    cv.wait_for(l, std::chrono::seconds(20), [&] { return open; });
  }
};
}  // namespace

TEST_CASE("a stream runs its work one item at a time in enqueue order", "[runtime][stream]") {
  CpuStream s;
  std::vector<int> order;  // written only by the stream thread
  std::atomic<int> running{0};
  bool overlapped = false;
  for (int i = 0; i < 200; ++i) {
    s.enqueue([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      order.push_back(i);
      running.fetch_sub(1);
    });
  }
  s.synchronize();
  REQUIRE(order.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(order[static_cast<std::size_t>(i)] == i);
  CHECK_FALSE(overlapped);
}

TEST_CASE("an exception thrown by stream work is rethrown at synchronize, later work is skipped",
          "[runtime][stream]") {
  CpuStream s;
  OpLog log;
  s.enqueue([&] { log.add("a"); });
  s.enqueue([] { throw std::runtime_error("boom in node 7"); });
  s.enqueue([&] { log.add("after failure"); });
  REQUIRE_THROWS_WITH(s.synchronize(), "boom in node 7");
  CHECK(log.entries() == std::vector<std::string>{"a"});
  // synchronize() consumed the failure: the stream is usable again.
  s.enqueue([&] { log.add("b"); });
  REQUIRE_NOTHROW(s.synchronize());
  CHECK(log.entries() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("synchronize from the stream's own work is a Misuse error, not a deadlock",
          "[runtime][stream]") {
  CpuStream s;
  s.enqueue([&] { s.synchronize(); });
  try {
    s.synchronize();
    FAIL("expected a failure");
  } catch (const RuntimeError& e) {
    CHECK(e.code() == ErrorCode::Misuse);
  }
}

TEST_CASE("event wait orders later work of one stream behind work recorded on another",
          "[runtime][event]") {
  CpuStream a, b;
  CpuEvent e;
  OpLog log;
  Gate gate;
  a.enqueue([&] {
    gate.pass();  // holds stream a until the test has enqueued everything on b
    log.add("a1");
  });
  e.record(a);
  e.wait(b);
  b.enqueue([&] { log.add("b1"); });
  gate.release();
  a.synchronize();
  b.synchronize();
  CHECK(log.index("a1") < log.index("b1"));
  CHECK(log.index("a1") >= 0);
}

TEST_CASE("waiting on a never-recorded event does not block", "[runtime][event]") {
  CpuStream s;
  CpuEvent e;
  e.wait(s);
  bool ran = false;
  s.enqueue([&] { ran = true; });
  s.synchronize();
  CHECK(ran);
  REQUIRE_NOTHROW(e.synchronize());
}

TEST_CASE("a wait pins the record current when it was issued, as cudaStreamWaitEvent does",
          "[runtime][event]") {
  CpuStream a, b, c;
  CpuEvent e;
  OpLog log;
  Gate gate_c;
  a.enqueue([&] { log.add("a1"); });
  e.record(a);
  e.wait(b);  // pins the record on a
  // Re-record on c behind a gate: if b waited for the newest record, b1 would follow c1.
  c.enqueue([&] {
    gate_c.pass();
    log.add("c1");
  });
  e.record(c);
  b.enqueue([&] {
    log.add("b1");
    gate_c.release();
  });
  b.synchronize();
  c.synchronize();
  a.synchronize();
  CHECK(log.index("a1") < log.index("b1"));
  CHECK(log.index("b1") < log.index("c1"));
}

TEST_CASE("a failure travels through an event: the waiting stream fails with UpstreamFailure",
          "[runtime][event]") {
  CpuStream a, b;
  CpuEvent e;
  bool b_ran = false;
  a.enqueue([] { throw std::runtime_error("compute failed"); });
  e.record(a);
  e.wait(b);
  b.enqueue([&] { b_ran = true; });
  REQUIRE_THROWS_WITH(a.synchronize(), "compute failed");
  try {
    b.synchronize();
    FAIL("expected the waiting stream to fail");
  } catch (const RuntimeError& err) {
    CHECK(err.code() == ErrorCode::UpstreamFailure);
  }
  CHECK_FALSE(b_ran);
}

TEST_CASE("an event wait that is never satisfied times out instead of hanging",
          "[runtime][event]") {
  CpuStream a, b;
  CpuEvent e(std::chrono::milliseconds(50));
  Gate gate;
  a.enqueue([&] { gate.pass(); });  // holds the record back until after b has given up
  e.record(a);
  e.wait(b);
  bool b_ran = false;
  b.enqueue([&] { b_ran = true; });
  try {
    b.synchronize();
    FAIL("expected a timeout");
  } catch (const RuntimeError& err) {
    CHECK(err.code() == ErrorCode::Timeout);
  }
  CHECK_FALSE(b_ran);
  gate.release();
  a.synchronize();
}

TEST_CASE("stream work rejects an empty callable", "[runtime][stream]") {
  CpuStream s;
  CHECK_THROWS_AS(s.enqueue(Work{}), RuntimeError);
}
