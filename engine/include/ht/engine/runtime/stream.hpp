// The execution interface the executor issues a schedule plan through: per rank a compute stream
// and a comm stream (reference sections 3.5 and 5.2), and events that order work across them.
// Backends implement it: CpuStream/CpuEvent (cpu_stream.hpp, one thread per stream) now, and a
// CUDA backend later (cudaStream_t / cudaEvent_t, work = a host callable that launches kernels on
// the stream, timing from event pairs). The executor only sees these two abstract classes.
#pragma once

#include <functional>
#include <map>
#include <string>

namespace ht::engine::runtime {

// What a piece of work is, for the measured timeline (ht::traces::Span). An empty name means
// "do not record a span" (bookkeeping work).
struct WorkLabel {
  std::string name;       // e.g. the plan node label "F mb3 L5 dispatch"
  std::string category;   // e.g. the slot "dispatch"
  std::map<std::string, std::string> args;  // microbatch, layer, node id, ...
};

using Work = std::function<void()>;

// An in-order work queue. Work enqueued on one stream runs one item at a time, in enqueue order.
// A throwing work item does not terminate anything: the first exception is kept, later work of
// the stream is skipped (events recorded after it complete as failed, so nothing waits forever),
// and synchronize() rethrows it and makes the stream usable again -- CUDA's sticky stream error,
// with a reset.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual void enqueue(Work work, WorkLabel label = {}) = 0;
  // Blocks the calling host thread until all work enqueued so far has finished; rethrows the
  // first failure of that work.
  virtual void synchronize() = 0;
  virtual int device() const = 0;  // rank
  virtual int id() const = 0;      // 0 = compute, 1 = comm (kComputeStream / kCommStream)
};

inline constexpr int kComputeStream = 0;
inline constexpr int kCommStream = 1;

// CUDA event semantics. record(s) captures "all work enqueued on s so far"; wait(s) makes work
// enqueued on s afterwards wait until the work captured by the most recent record (at the time
// wait is called) has completed. Waiting on a never-recorded event is a no-op. One event per
// microbatch chunk, recorded and waited around every node on both streams, serialises that
// microbatch's nodes in issue order across the two streams (event_chain.hpp).
class Event {
 public:
  virtual ~Event() = default;
  virtual void record(Stream& stream) = 0;
  virtual void wait(Stream& stream) = 0;
  // Blocks the host until the most recent record has completed; throws if that record was
  // reached by a failed stream.
  virtual void synchronize() = 0;
};

}  // namespace ht::engine::runtime
