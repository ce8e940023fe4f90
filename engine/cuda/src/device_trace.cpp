// device_timeline (device_model.hpp): a device model's traced slot pieces as the spans of the
// one-rank plan's nodes.
#include <map>
#include <string>
#include <tuple>

#include "ht/engine/cuda/device_model.hpp"
#include "ht/engine/error.hpp"
#include "ht/schedule/node_args.hpp"

namespace ht::engine::cuda {

traces::Timeline device_timeline(const std::vector<DeviceModel::Span>& spans, const schedule::Plan& plan) {
  using Key = std::tuple<std::string, char, int>;  // slot, phase, layer
  std::map<Key, const schedule::Node*> nodes;
  for (const auto& n : plan.nodes)
    if (n.rank == 0 && n.microbatch <= 0 && !n.mtp)
      nodes[Key{std::string(schedule::to_string(n.slot)), n.phase == schedule::Phase::Forward ? 'F' : 'B', n.layer}] = &n;
  traces::Timeline t;
  t.source = "engine";
  // The device runs everything on one stream; spans keep the stream of their plan node (the
  // combine is a comm-stream node), so the timeline reads like the executor's.
  t.streams.push_back({0, 0, "compute", traces::Role::Compute});
  t.streams.push_back({0, 1, "comm", traces::Role::Comm});
  for (const auto& s : spans) {
    const auto it = nodes.find(Key{s.slot, s.phase, s.layer});
    if (it == nodes.end())
      throw EngineError(ErrorCode::BadConfig, "device trace: the plan has no " + std::string(1, s.phase) + " " + s.slot +
                                                  " node for layer " + std::to_string(s.layer));
    traces::Span span;
    span.name = it->second->label();
    span.category = s.slot;
    span.start_s = s.start_s;
    span.duration_s = s.duration_s;
    span.args = schedule::node_args(*it->second);
    if (it->second->stream == schedule::Stream::Comm) {
      span.stream = 1;
      span.role = traces::Role::Comm;
    }
    t.spans.push_back(std::move(span));
  }
  return t;
}

}  // namespace ht::engine::cuda
