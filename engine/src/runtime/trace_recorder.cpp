// Thread-safe span collection for the engine's measured timeline (trace_recorder.hpp).
#include <ht/engine/runtime/trace_recorder.hpp>

#include <algorithm>
#include <tuple>
#include <utility>

namespace ht::engine::runtime {

void TraceRecorder::add_stream(traces::StreamInfo info) {
  std::lock_guard lock(mutex_);
  for (const auto& s : streams_) {
    if (s.device == info.device && s.stream == info.stream) return;
  }
  streams_.push_back(std::move(info));
}

void TraceRecorder::add_span(traces::Span span) {
  std::lock_guard lock(mutex_);
  spans_.push_back(std::move(span));
}

void TraceRecorder::set_metadata(const std::string& key, const std::string& value) {
  std::lock_guard lock(mutex_);
  metadata_[key] = value;
}

traces::Timeline TraceRecorder::timeline() const {
  traces::Timeline t;
  {
    std::lock_guard lock(mutex_);
    t.streams = streams_;
    t.spans = spans_;
    t.metadata = metadata_;
  }
  t.source = "engine";
  std::sort(t.streams.begin(), t.streams.end(), [](const auto& a, const auto& b) {
    return std::tie(a.device, a.stream) < std::tie(b.device, b.stream);
  });
  std::sort(t.spans.begin(), t.spans.end(), [](const auto& a, const auto& b) {
    return std::tie(a.device, a.stream, a.start_s, a.name) <
           std::tie(b.device, b.stream, b.start_s, b.name);
  });
  return t;
}

}  // namespace ht::engine::runtime
