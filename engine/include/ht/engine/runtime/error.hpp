// Typed failure of the engine runtime (streams, events, in-process transport). The executor and
// the CLI turn it into one line; the code lets tests and callers tell a bad argument from a
// deadlock from a failure that was propagated from another rank or stream.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ht::engine::runtime {

// How long a rendezvous or an event wait may block before the deadlock detector throws Timeout.
// Generous: it only has to turn a hang into a message, never to fire on slow work.
inline constexpr std::chrono::milliseconds kDefaultDeadlockTimeout{60000};

enum class ErrorCode {
  InvalidArgument,   // a call was malformed on this rank alone (wrong peer count, bad link model)
  SizeMismatch,      // the members of one collective / p2p pair disagree on sizes
  CollectiveMismatch,  // members called different collectives at the same position in their order
  Timeout,           // a rendezvous or an event wait did not complete in time (deadlock detector)
  Aborted,           // the transport was aborted because some other rank or stream failed
  UpstreamFailure,   // an event waited on was recorded by a stream whose earlier work failed
  Misuse,            // API used against its contract (e.g. synchronize from the stream's own thread)
};

std::string_view to_string(ErrorCode code);

class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace ht::engine::runtime
