// Durations and the pure egress-link schedule of the transport throttle (link_model.hpp).
#include <ht/engine/runtime/link_model.hpp>

#include <ht/engine/runtime/error.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace ht::engine::runtime {

std::chrono::nanoseconds LinkModel::duration(std::uint64_t bytes) const {
  // bytes / (GB/s) is nanoseconds: 1 GB/s moves one byte per nanosecond.
  double ns = latency_us * 1e3;
  if (bandwidth_gbps > 0) ns += static_cast<double>(bytes) / bandwidth_gbps;
  return std::chrono::nanoseconds(std::llround(ns));
}

// Bounds that keep duration() inside 64-bit nanoseconds for any message the engine sends (1e300
// would round to a negative duration and silently turn the throttle off): a second per message at
// most, and at least 1 MB/s when the bandwidth is throttled at all.
void LinkModel::validate() const {
  if (!std::isfinite(bandwidth_gbps) || bandwidth_gbps < 0 || (bandwidth_gbps > 0 && bandwidth_gbps < 1e-3) ||
      bandwidth_gbps > 1e6) {
    throw RuntimeError(ErrorCode::InvalidArgument,
                       "link model: bandwidth_gbps (--link-gbps) must be 0 (off) or in [0.001, 1e6] GB/s, got " +
                           std::to_string(bandwidth_gbps));
  }
  if (!std::isfinite(latency_us) || latency_us < 0 || latency_us > 1e6) {
    throw RuntimeError(ErrorCode::InvalidArgument,
                       "link model: latency_us (--link-latency-us) must be in [0, 1e6] us (a second per message), got " +
                           std::to_string(latency_us));
  }
}

void LinkModel::write_metadata(std::map<std::string, std::string>& metadata) const {
  auto text = [](double v) {
    std::ostringstream out;
    out.precision(17);
    out << v;
    return out.str();
  };
  metadata["link.bandwidth_gbps"] = text(bandwidth_gbps);
  metadata["link.latency_us"] = text(latency_us);
  metadata["link.throttle"] = enabled() ? "on" : "off";
}

LinkScheduleResult schedule_links(const LinkModel& model, std::chrono::nanoseconds start,
                                  std::vector<std::chrono::nanoseconds>& link_free,
                                  const std::vector<std::vector<LinkMessage>>& phases) {
  using std::chrono::nanoseconds;
  const std::size_t n = link_free.size();
  LinkScheduleResult result;
  result.finish.assign(n, start);
  result.sent.assign(n, LinkStats{});
  std::vector<nanoseconds>& ready = result.finish;  // when each rank may start the next phase
  for (const auto& phase : phases) {
    std::vector<nanoseconds> next = ready;
    std::vector<nanoseconds> egress = ready;  // end of the rank's last send in this phase
    for (const LinkMessage& m : phase) {
      if (m.src < 0 || m.dst < 0 || static_cast<std::size_t>(m.src) >= n ||
          static_cast<std::size_t>(m.dst) >= n) {
        throw RuntimeError(ErrorCode::InvalidArgument, "link schedule: message rank out of range");
      }
      if (m.src == m.dst || m.bytes == 0) continue;
      const auto s = static_cast<std::size_t>(m.src);
      const auto d = static_cast<std::size_t>(m.dst);
      const nanoseconds begin = std::max(egress[s], link_free[s]);
      const nanoseconds took = model.duration(m.bytes);
      const nanoseconds end = begin + took;
      egress[s] = end;
      link_free[s] = end;
      next[s] = std::max(next[s], end);
      next[d] = std::max(next[d], end);  // the receiver has the data when the sender is done
      result.sent[s].messages += 1;
      result.sent[s].bytes += m.bytes;
      result.sent[s].busy += took;
    }
    ready = next;
  }
  return result;
}

}  // namespace ht::engine::runtime
