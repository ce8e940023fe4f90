// Per-microbatch event chains (reference 3.5 / 5.2): nodes of one microbatch run in issue order
// across both streams; different microbatches overlap across streams. Checked on an operation
// log and with handshakes, never on durations.
#include <catch2/catch.hpp>

#include <ht/engine/runtime/cpu_stream.hpp>
#include <ht/engine/runtime/event_chain.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime_test_support.hpp"

using namespace ht::engine::runtime;
using ht::engine::runtime::test::OpLog;

namespace {
EventChains cpu_chains() {
  return EventChains([] { return std::make_unique<CpuEvent>(); });
}

// Both sides announce themselves and wait (bounded) for the other: it completes only if the two
// work items really run at the same time.
struct Handshake {
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  bool meet() {
    std::unique_lock l(m);
    ++arrived;
    cv.notify_all();
    return cv.wait_for(l, std::chrono::seconds(20), [&] { return arrived == 2; });
  }
};
}  // namespace

TEST_CASE("one microbatch's nodes run in issue order across the compute and comm streams",
          "[runtime][chain]") {
  CpuStream comp(0, kComputeStream);
  CpuStream comm(0, kCommStream);
  EventChains chains = cpu_chains();
  OpLog log;
  std::atomic<bool> dispatch_started{false};
  const ChainKey mb0{0, 0};
  // pre_dispatch (comp) -> dispatch (comm) -> mlp (comp) -> combine (comm), as one layer plan.
  chains.issue(mb0, comp, [&] {
    log.add("pre_dispatch start");
    // Give a broken chain every chance to start dispatch early; no assertion on this wait.
    for (int i = 0; i < 50 && !dispatch_started; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    log.add("pre_dispatch end");
  });
  chains.issue(mb0, comm, [&] {
    dispatch_started = true;
    log.add("dispatch");
  });
  chains.issue(mb0, comp, [&] { log.add("mlp"); });
  chains.issue(mb0, comm, [&] { log.add("combine"); });
  comp.synchronize();
  comm.synchronize();
  CHECK(log.entries() ==
        std::vector<std::string>{"pre_dispatch start", "pre_dispatch end", "dispatch", "mlp", "combine"});
}

TEST_CASE("two microbatch chains overlap across streams and keep their own order",
          "[runtime][chain]") {
  CpuStream comp(0, kComputeStream);
  CpuStream comm(0, kCommStream);
  EventChains chains = cpu_chains();
  OpLog log;
  Handshake overlap;
  bool met_b = false, met_f = false;
  const ChainKey b{0, 0};  // backward of microbatch 0
  const ChainKey f{1, 0};  // forward of microbatch 1
  // Combined-1F1B steps 2..5 (reference 3.6): b.combine (comm) || f.pre_dispatch (comp), then
  // b.mlp (comp) || f.dispatch (comm).
  chains.issue(b, comm, [&] {
    log.add("b.combine");
    met_b = overlap.meet();
  });
  chains.issue(f, comp, [&] {
    log.add("f.pre_dispatch");
    met_f = overlap.meet();
  });
  chains.issue(b, comp, [&] { log.add("b.mlp"); });
  chains.issue(f, comm, [&] { log.add("f.dispatch"); });
  comp.synchronize();
  comm.synchronize();
  CHECK(met_b);  // both items ran at the same time: chains of different microbatches overlap
  CHECK(met_f);
  const auto entries = log.entries();
  REQUIRE(entries.size() == 4);
  CHECK(log.index("b.combine") < log.index("b.mlp"));          // chain b
  CHECK(log.index("f.pre_dispatch") < log.index("f.dispatch"));  // chain f
  CHECK(log.index("f.pre_dispatch") < log.index("b.mlp"));     // compute stream order
  CHECK(log.index("b.combine") < log.index("f.dispatch"));     // comm stream order
}

TEST_CASE("wait_all makes step-level work wait for the last node of every chain",
          "[runtime][chain]") {
  CpuStream comp(0, kComputeStream);
  CpuStream comm(0, kCommStream);
  CpuStream step(0, 2);
  EventChains chains = cpu_chains();
  OpLog log;
  // Chains end on different streams, later ones sooner, so waiting on any single chain would let
  // the step-level work run before some chain has finished.
  chains.issue({0, 0}, comp, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    log.add("mb0");
  });
  chains.issue({1, 0}, comm, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    log.add("mb1");
  });
  chains.issue({2, 0}, comp, [&] { log.add("mb2"); });
  chains.wait_all(step);
  step.enqueue([&] { log.add("grad all-reduce"); });
  step.synchronize();
  comp.synchronize();
  comm.synchronize();
  REQUIRE(log.entries().size() == 4);
  CHECK(log.entries().back() == "grad all-reduce");
  CHECK(chains.keys() == std::vector<ChainKey>{{0, 0}, {1, 0}, {2, 0}});
}
