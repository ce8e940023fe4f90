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

// Adds key = value to the arguments of the span the calling work item runs in (what only the
// work knows: the rows its experts received, the bytes it sent to each peer), as a profiler's
// record_function arguments. Outside labelled stream work it does nothing. The CPU streams also
// add "cpu_us": the thread CPU time of the work, which excludes time spent descheduled, asleep
// or waiting, so a calibration can tell work from contention (sim/calibrate.hpp).
void annotate_span(const std::string& key, const std::string& value);
// Adds key = the thread CPU time (us) the calling work item has used so far, unless the span has
// the key already: the executor marks "pre_cpu_us" at a comm node's first collective, which
// splits the node's host work into what delays its arrival and what follows the transfer.
void mark_span_cpu(const std::string& key);

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
