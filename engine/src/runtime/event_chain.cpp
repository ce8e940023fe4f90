// Per-microbatch event chains over any backend's streams and events (event_chain.hpp).
#include <ht/engine/runtime/event_chain.hpp>

#include <ht/engine/runtime/error.hpp>

#include <utility>

namespace ht::engine::runtime {

EventChains::EventChains(EventFactory make_event) : make_event_(std::move(make_event)) {
  if (!make_event_) throw RuntimeError(ErrorCode::InvalidArgument, "EventChains: no event factory");
}

Event& EventChains::event(ChainKey key) {
  auto& slot = events_[key];
  if (!slot) slot = make_event_();
  return *slot;
}

void EventChains::issue(ChainKey key, Stream& stream, Work work, WorkLabel label) {
  Event& e = event(key);
  // Reference 3.5, forward step 2 and 5 (and backward 1 and 3): wait, run, record.
  e.wait(stream);
  stream.enqueue(std::move(work), std::move(label));
  e.record(stream);
}

void EventChains::wait_all(Stream& stream) {
  for (auto& [key, e] : events_) e->wait(stream);
}

std::vector<ChainKey> EventChains::keys() const {
  std::vector<ChainKey> out;
  out.reserve(events_.size());
  for (const auto& [key, e] : events_) out.push_back(key);
  return out;
}

}  // namespace ht::engine::runtime
