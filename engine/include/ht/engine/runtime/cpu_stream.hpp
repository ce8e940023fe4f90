// CPU backend of the stream interface: every stream is a worker thread draining a FIFO queue, so
// a rank's compute and comm streams really run concurrently and the overlap of the combined-1F1B
// schedule can be measured on a laptop. Events are generation counters guarded by a mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <thread>

#include <ht/engine/runtime/error.hpp>
#include <ht/engine/runtime/stream.hpp>
#include <ht/engine/runtime/trace_recorder.hpp>

namespace ht::engine::runtime {

// Called once on the stream thread with the first failure after each synchronize(), so that an
// owner can abort collectives that other ranks would otherwise wait for (CpuWorld does).
using StreamErrorHook = std::function<void(const std::exception_ptr&)>;

class CpuStream final : public Stream {
 public:
  // `id` 0 is named "compute" (role compute), 1 "comm" (role comm), others "stream <id>" (role
  // other). Labelled work becomes spans in `recorder` (null: not measured).
  explicit CpuStream(int device = 0, int id = kComputeStream, TraceRecorder* recorder = nullptr,
                     StreamErrorHook on_error = {});
  ~CpuStream() override;  // drains the queue, then joins; a pending failure is dropped
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  void enqueue(Work work, WorkLabel label = {}) override;
  void synchronize() override;
  int device() const override { return device_; }
  int id() const override { return id_; }
  const std::string& name() const { return name_; }
  // Asks the OS to run this stream's thread at real-time priority; false where it refuses
  // (no root / CAP_SYS_NICE). realtime() tells whether it was granted.
  bool request_realtime();
  bool realtime() const { return realtime_; }

  // Bookkeeping item for events: runs even after a failure and is told whether the stream has
  // failed; an exception it throws fails the stream like work does. Not measured.
  void enqueue_control(std::function<void(bool stream_failed)> control);

 private:
  struct Item {
    Work work;
    WorkLabel label;
    std::function<void(bool)> control;
  };
  void run();
  void fail(std::exception_ptr error);

  int device_;
  int id_;
  std::string name_;
  traces::Role role_;
  TraceRecorder* recorder_;
  StreamErrorHook on_error_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<Item> queue_;
  std::size_t unfinished_ = 0;  // enqueued and not yet finished
  bool stopping_ = false;
  std::exception_ptr error_;
  bool realtime_ = false;
  std::thread thread_;  // last member: started after everything above is initialised
};

// Event for CpuStream. Each record gets a generation number when the host calls record(); the
// generation completes when the stream reaches it. wait() pins the generation current at the call,
// as cudaStreamWaitEvent does, so a later re-record does not move an earlier wait.
class CpuEvent final : public Event {
 public:
  // `timeout` bounds how long a stream blocks in wait(): a dependency cycle or a lost record
  // becomes a Timeout error on that stream instead of a hang.
  explicit CpuEvent(std::chrono::milliseconds timeout = kDefaultDeadlockTimeout);

  void record(Stream& stream) override;
  void wait(Stream& stream) override;
  void synchronize() override;

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable completed;
    std::uint64_t recorded = 0;          // generations handed out by record()
    std::set<std::uint64_t> pending;     // recorded, not yet reached by their stream
    std::set<std::uint64_t> failed;      // reached by a stream that had failed
    // Generations someone blocks on, with their waiter counts: a completing record wakes the
    // waiters only when one waits for it. A blanket notify woke the comm thread (real-time, so it
    // preempts the recorder) at every record of its chain, costing ~40 us per node.
    std::map<std::uint64_t, int> waited;
    void wait_for(std::uint64_t generation, std::chrono::milliseconds timeout);
  };
  std::shared_ptr<State> state_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ht::engine::runtime
