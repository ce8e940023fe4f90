// Collects the measured spans of labelled work into one ht::traces::Timeline: one steady-clock
// origin shared by every stream of every rank, so spans of different ranks are comparable. The
// executor's measured timeline (data flow 2 of DESIGN.md) and the twin's calibration start here.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <ht/traces/timeline.hpp>

namespace ht::engine::runtime {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder() : origin_(Clock::now()) {}

  Clock::time_point origin() const { return origin_; }
  double seconds_since_origin(Clock::time_point t) const {
    return std::chrono::duration<double>(t - origin_).count();
  }

  // Declares a stream so that it appears in the timeline even when it recorded no span.
  void add_stream(traces::StreamInfo info);
  void add_span(traces::Span span);
  void set_metadata(const std::string& key, const std::string& value);

  // Snapshot: streams sorted by (device, stream), spans by (device, stream, start, name).
  traces::Timeline timeline() const;

 private:
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<traces::StreamInfo> streams_;
  std::vector<traces::Span> spans_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace ht::engine::runtime
