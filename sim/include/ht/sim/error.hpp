// Typed errors of the SimGrid twin: bad platform text, bad cost tables, malformed plans and
// simulations that cannot finish (a deadlocked schedule). The CLI prints what() on one line.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ht::sim {

enum class SimErrorCode {
  BadPlatform,  // unknown preset, bad key=value, impossible sizes, unreadable XML
  BadCosts,     // unreadable or malformed --costs JSON
  BadPlan,      // plan inconsistent with itself or with the platform (rank out of range, ...)
  Deadlock,     // the replay stopped with nodes still waiting
};

std::string_view to_string(SimErrorCode code);

class SimError : public std::runtime_error {
 public:
  SimError(SimErrorCode code, const std::string& message)
      : std::runtime_error(std::string(to_string(code)) + ": " + message), code_(code), detail_(message) {}
  SimErrorCode code() const noexcept { return code_; }
  // The message without the code prefix (to re-throw with more context).
  const std::string& detail() const noexcept { return detail_; }

 private:
  SimErrorCode code_;
  std::string detail_;
};

}  // namespace ht::sim
