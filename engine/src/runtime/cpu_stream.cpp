// CPU streams and events: the worker loop, sticky failures, and event generations
// (cpu_stream.hpp explains the model).
#include <ht/engine/runtime/cpu_stream.hpp>

#include <ht/engine/runtime/error.hpp>

#include <pthread.h>
#include <sched.h>

#include <cstdio>
#include <ctime>
#include <utility>

namespace ht::engine::runtime {

namespace {
// The arguments of the span the current thread's work item runs in (null outside work).
thread_local std::map<std::string, std::string>* current_span_args = nullptr;
thread_local double current_span_cpu_start = 0;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string microseconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", seconds * 1e6);
  return text;
}
}  // namespace

void annotate_span(const std::string& key, const std::string& value) {
  if (current_span_args) (*current_span_args)[key] = value;
}

void mark_span_cpu(const std::string& key) {
  if (current_span_args && !current_span_args->contains(key))
    (*current_span_args)[key] = microseconds_text(thread_cpu_seconds() - current_span_cpu_start);
}

CpuStream::CpuStream(int device, int id, TraceRecorder* recorder, StreamErrorHook on_error)
    : device_(device),
      id_(id),
      name_(id == kComputeStream ? "compute" : id == kCommStream ? "comm" : "stream " + std::to_string(id)),
      role_(id == kComputeStream ? traces::Role::Compute
            : id == kCommStream  ? traces::Role::Comm
                                 : traces::Role::Other),
      recorder_(recorder),
      on_error_(std::move(on_error)) {
  if (recorder_) recorder_->add_stream(traces::StreamInfo{device_, id_, name_, role_});
  thread_ = std::thread([this] { run(); });
}

bool CpuStream::request_realtime() {
  // SCHED_FIFO priority 1: the stream's thread preempts normal threads as soon as it is woken
  // (a finished transfer, a recorded event) instead of waiting for a time slice. Granted to root
  // or CAP_SYS_NICE; refused silently otherwise.
  sched_param sp{};
  sp.sched_priority = 1;
  realtime_ = pthread_setschedparam(thread_.native_handle(), SCHED_FIFO, &sp) == 0;
  return realtime_;
}

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  thread_.join();
}

void CpuStream::enqueue(Work work, WorkLabel label) {
  if (!work) throw RuntimeError(ErrorCode::InvalidArgument, "stream " + name_ + ": empty work");
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Item{std::move(work), std::move(label), {}});
    ++unfinished_;
  }
  work_ready_.notify_one();
}

void CpuStream::enqueue_control(std::function<void(bool)> control) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Item{{}, {}, std::move(control)});
    ++unfinished_;
  }
  work_ready_.notify_one();
}

void CpuStream::synchronize() {
  if (std::this_thread::get_id() == thread_.get_id()) {
    throw RuntimeError(ErrorCode::Misuse, "stream " + name_ + " of rank " +
                                              std::to_string(device_) +
                                              ": synchronize() called from its own work (deadlock)");
  }
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return unfinished_ == 0; });
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void CpuStream::fail(std::exception_ptr error) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    if (!error_) {
      error_ = error;
      first = true;
    }
  }
  // Outside the lock: the hook may take other locks (the transport's) and must not nest in ours.
  if (first && on_error_) on_error_(error);
}

void CpuStream::run() {
  for (;;) {
    Item item;
    bool failed = false;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      failed = error_ != nullptr;
    }
    if (item.control) {
      try {
        item.control(failed);
      } catch (...) {
        fail(std::current_exception());
      }
    } else if (!failed) {
      const bool labelled = recorder_ && !item.label.name.empty();
      if (labelled) current_span_args = &item.label.args;
      // The wall interval encloses the CPU one, so a span's cpu_us never exceeds its duration
      // by more than the clocks' granularity.
      const auto start = TraceRecorder::Clock::now();
      const double cpu_start = labelled ? thread_cpu_seconds() : 0;
      current_span_cpu_start = cpu_start;
      try {
        item.work();
      } catch (...) {
        fail(std::current_exception());
      }
      const double cpu_end = labelled ? thread_cpu_seconds() : 0;
      const auto end = TraceRecorder::Clock::now();
      current_span_args = nullptr;
      if (labelled) {
        item.label.args["cpu_us"] = microseconds_text(cpu_end - cpu_start);
        traces::Span span;
        span.name = std::move(item.label.name);
        span.category = std::move(item.label.category);
        span.start_s = recorder_->seconds_since_origin(start);
        span.duration_s = std::chrono::duration<double>(end - start).count();
        span.device = device_;
        span.stream = id_;
        span.role = role_;
        span.args = std::move(item.label.args);
        recorder_->add_span(std::move(span));
      }
    }
    // Destroy the callables before reporting idle: they may own buffers the host frees next.
    item = Item{};
    {
      std::lock_guard lock(mutex_);
      if (--unfinished_ == 0) idle_.notify_all();
    }
  }
}

// ---- CpuEvent ----------------------------------------------------------------------------------

namespace {
CpuStream& as_cpu(Stream& stream) {
  auto* cpu = dynamic_cast<CpuStream*>(&stream);
  if (!cpu) throw RuntimeError(ErrorCode::Misuse, "CpuEvent used with a stream of another backend");
  return *cpu;
}
}  // namespace

CpuEvent::CpuEvent(std::chrono::milliseconds timeout)
    : state_(std::make_shared<State>()), timeout_(timeout) {}

void CpuEvent::record(Stream& stream) {
  CpuStream& cpu = as_cpu(stream);
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(state_->mutex);
    generation = ++state_->recorded;
    state_->pending.insert(generation);
  }
  cpu.enqueue_control([state = state_, generation](bool stream_failed) {
    bool waited = false;
    {
      std::lock_guard lock(state->mutex);
      state->pending.erase(generation);
      if (stream_failed) state->failed.insert(generation);
      waited = state->waited.contains(generation);
    }
    if (waited) state->completed.notify_all();
  });
}

void CpuEvent::wait(Stream& stream) {
  CpuStream& cpu = as_cpu(stream);
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(state_->mutex);
    generation = state_->recorded;
  }
  if (generation == 0) return;  // never recorded: nothing to wait for (CUDA semantics)
  cpu.enqueue_control([state = state_, generation, timeout = timeout_](bool stream_failed) {
    if (stream_failed) return;  // the stream skips its work anyway; do not block it
    state->wait_for(generation, timeout);
  });
}

void CpuEvent::synchronize() {
  std::uint64_t generation = 0;
  {
    std::lock_guard lock(state_->mutex);
    generation = state_->recorded;
  }
  if (generation != 0) state_->wait_for(generation, timeout_);
}

void CpuEvent::State::wait_for(std::uint64_t generation, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex);
  ++waited[generation];
  const bool reached = completed.wait_for(lock, timeout, [&] { return !pending.contains(generation); });
  if (--waited[generation] == 0) waited.erase(generation);
  if (!reached) {
    throw RuntimeError(ErrorCode::Timeout,
                       "event wait: record #" + std::to_string(generation) + " not reached after " +
                           std::to_string(timeout.count()) + " ms (dependency cycle or lost work?)");
  }
  if (failed.contains(generation)) {
    throw RuntimeError(ErrorCode::UpstreamFailure,
                       "event wait: the stream that recorded it had failed earlier");
  }
}

}  // namespace ht::engine::runtime
