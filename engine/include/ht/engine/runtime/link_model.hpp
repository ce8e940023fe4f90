// Link model for the in-process transport: on a laptop, loopback copies are nearly free, so the
// comm stream would never show the all-to-all cost the schedule is built to hide. The throttle
// makes each message occupy its sender's egress link for latency + bytes / bandwidth, one message
// at a time per rank, and the comm thread sleeps until the modelled completion. This file is the
// pure part (durations, link schedule); inproc_transport.cpp applies it with real sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ht::engine::runtime {

struct LinkModel {
  // Egress bandwidth per rank in GB/s = 1e9 bytes per second (bytes, like the twin's nvlink_gbps).
  // 0 = infinite (no bandwidth term).
  double bandwidth_gbps = 0;
  double latency_us = 0;  // per message; 0 = none
  // Both zero (the default): the throttle is off; traffic is still counted.
  bool enabled() const { return bandwidth_gbps > 0 || latency_us > 0; }
  // Time one message of `bytes` occupies the sender's link, rounded to whole nanoseconds.
  std::chrono::nanoseconds duration(std::uint64_t bytes) const;
  // Throws RuntimeError(InvalidArgument) for negative or non-finite parameters.
  void validate() const;
  // Writes link.bandwidth_gbps / link.latency_us / link.throttle into timeline metadata.
  void write_metadata(std::map<std::string, std::string>& metadata) const;
};

// Traffic sent by one rank over its egress link. Messages to oneself and empty messages are not
// sent (a local copy / nothing to carry, as NCCL skips zero-count sends) and are not counted.
struct LinkStats {
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::chrono::nanoseconds busy{0};  // modelled link occupancy (0 when the throttle is off)
  bool operator==(const LinkStats&) const = default;
};

struct LinkMessage {
  int src = 0;  // index into the schedule's ranks
  int dst = 0;
  std::uint64_t bytes = 0;
};

struct LinkScheduleResult {
  std::vector<std::chrono::nanoseconds> finish;  // per rank: all its sends done, all receives in
  std::vector<LinkStats> sent;                   // per rank: traffic it put on its link
};

// Pure link schedule of a collective made of phases, all ranks starting at `start` (a rendezvous):
//  - within a phase each rank sends its messages in the listed order, back to back, each starting
//    when its link is free (link_free[src], updated in place) and taking model.duration(bytes);
//  - a rank starts phase k+1 when it has finished sending phase k and received every phase-k
//    message addressed to it (the all-reduce's all-gather needs the reduced chunk);
//  - finish[r] = that same condition after the last phase.
// Times are offsets from any fixed origin; link_free has one entry per rank.
LinkScheduleResult schedule_links(const LinkModel& model, std::chrono::nanoseconds start,
                                  std::vector<std::chrono::nanoseconds>& link_free,
                                  const std::vector<std::vector<LinkMessage>>& phases);

}  // namespace ht::engine::runtime
