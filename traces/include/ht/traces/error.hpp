// The one exception type of ht::traces: every bad file, bad number, bad regex or failed write
// surfaces as a TraceError with a one-line message a person can act on (the CLI prints it as
// "error: ..." and exits 2).
#pragma once

#include <stdexcept>
#include <string>

namespace ht::traces {

enum class TraceErrorCode {
  Io,        // cannot open, read, write or rename a file
  Parse,     // not well-formed JSON (truncated, garbage, number overflow)
  Schema,    // well-formed JSON that is not a usable Chrome trace (wrong types, missing fields)
  Range,     // a number outside what a timeline can hold (negative duration, huge pid, ...)
  Argument,  // a bad option: invalid regex, empty window, ...
};

class TraceError : public std::runtime_error {
 public:
  TraceError(TraceErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  TraceErrorCode code() const noexcept { return code_; }

 private:
  TraceErrorCode code_;
};

}  // namespace ht::traces
