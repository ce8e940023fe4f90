// The engine's typed error: bad configurations, unsupported layer symbols, bad batches and bad
// checkpoint files all surface as EngineError with a one-line message a person can act on (the
// CLI prints "error: <message>" and exits 2).
#pragma once

#include <stdexcept>
#include <string>

namespace ht::engine {

enum class ErrorCode {
  Unsupported,   // a layer symbol or option the engine does not implement
  BadConfig,     // model dimensions that do not fit together
  BadInput,      // batch shapes, token ids
  BadCheckpoint, // unreadable, truncated, corrupted or mismatched checkpoint files
  Io,            // file system errors
};

class EngineError : public std::runtime_error {
 public:
  EngineError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace ht::engine
