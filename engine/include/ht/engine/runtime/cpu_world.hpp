// Ranks as threads: the CPU backend's stand-in for a cluster. Each rank has a host thread (which
// issues its plan, like Megatron's Python thread issues kernels), a compute stream and a comm
// stream (each a worker thread), all measured against one TraceRecorder, and the ranks talk
// through one InProcTransport. The executor builds its EP / DP / pipeline groups on transport()
// before run(), then issues each rank's RankPlan.issue from the body.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include <ht/engine/runtime/cpu_stream.hpp>
#include <ht/engine/runtime/inproc_transport.hpp>
#include <ht/engine/runtime/link_model.hpp>
#include <ht/engine/runtime/trace_recorder.hpp>

namespace ht::engine::runtime {

struct CpuWorldOptions {
  int ranks = 1;
  LinkModel link;  // throttle of the transport; off by default
  // Comm streams at real-time priority where the OS allows it, the CPU counterpart of Megatron's
  // high-priority comm stream: a comm thread woken by a finished transfer preempts compute at
  // once. On 2 cores this gives the faster overlapped step (README, overlap benchmark); a
  // non-root user or a loaded machine may want normal priority, so it is a switch.
  bool comm_realtime = true;
  std::chrono::milliseconds timeout = kDefaultDeadlockTimeout;  // collectives and event waits
};

// What one rank's host code sees.
struct RankContext {
  int rank = 0;
  CpuStream& compute;
  CpuStream& comm;
  std::chrono::milliseconds timeout;
  Stream& stream(int id) { return id == kCommStream ? static_cast<Stream&>(comm) : compute; }
  std::unique_ptr<Event> make_event() const { return std::make_unique<CpuEvent>(timeout); }
};

class CpuWorld {
 public:
  explicit CpuWorld(CpuWorldOptions options);
  explicit CpuWorld(int ranks, LinkModel link = {}) : CpuWorld(CpuWorldOptions{ranks, link}) {}
  ~CpuWorld();
  CpuWorld(const CpuWorld&) = delete;
  CpuWorld& operator=(const CpuWorld&) = delete;

  int ranks() const { return options_.ranks; }
  CpuStream& compute(int rank);
  CpuStream& comm(int rank);
  InProcTransport& transport() { return transport_; }
  TraceRecorder& recorder() { return recorder_; }

  // Runs `body` once per rank, each on its own host thread, then synchronizes both streams of
  // that rank. Any failure (body or stream work) aborts the transport so that no other rank waits
  // for the failed one; after all ranks are done, the root cause is rethrown: the failure of the
  // lowest rank that is not itself an Aborted / UpstreamFailure consequence, else the lowest.
  // A world whose run() failed has an aborted transport and cannot run collectives again.
  // The streams drain after `body` has returned: work must own (or share) what it touches, or
  // the body must synchronize its streams before its locals go away.
  void run(const std::function<void(RankContext&)>& body);

  // Measured spans of all labelled work so far; metadata carries the link model and rank count.
  traces::Timeline timeline() const;

 private:
  CpuWorldOptions options_;
  TraceRecorder recorder_;
  InProcTransport transport_;
  // Streams last: destroyed (joined) first, while the recorder and transport still exist.
  std::vector<std::unique_ptr<CpuStream>> compute_;
  std::vector<std::unique_ptr<CpuStream>> comm_;
};

}  // namespace ht::engine::runtime
