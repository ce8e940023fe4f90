// Per-microbatch event chains (reference section 3.5): one event per model-chunk schedule plan,
// i.e. per (microbatch, vp_stage) on a rank, shared by all its nodes on both streams. Issuing a
// node = wait(event) on its stream, enqueue the node's work, record(event) on that stream. Nodes
// of one microbatch therefore run in host issue order across the compute and comm streams, while
// nodes of different microbatches overlap only across streams (section 5.2, invariants 1 and 2).
//
// The executor walks RankPlan.issue and calls issue(ChainKey{node.microbatch, node.vp_stage},
// stream of node.stream, work, label); step-level nodes (microbatch -1, e.g. the gradient
// all-reduce that depends on the last node of every chain) first call wait_all() on their stream.
#pragma once

#include <compare>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include <ht/engine/runtime/stream.hpp>

namespace ht::engine::runtime {

struct ChainKey {
  int microbatch = 0;
  int vp_stage = 0;
  auto operator<=>(const ChainKey&) const = default;
};

// Owned by one rank's host thread (not thread-safe), like the plan it issues.
class EventChains {
 public:
  using EventFactory = std::function<std::unique_ptr<Event>()>;
  explicit EventChains(EventFactory make_event);

  // Enqueues `work` on `stream` after every node issued earlier on the same chain (on any stream).
  void issue(ChainKey key, Stream& stream, Work work, WorkLabel label = {});
  // Makes later work on `stream` wait for the last node issued so far on every chain.
  void wait_all(Stream& stream);
  Event& event(ChainKey key);  // created on first use
  std::vector<ChainKey> keys() const;

 private:
  EventFactory make_event_;
  std::map<ChainKey, std::unique_ptr<Event>> events_;
};

}  // namespace ht::engine::runtime
