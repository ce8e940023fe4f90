// Spelling of runtime error codes for messages and reports (error.hpp).
#include <ht/engine/runtime/error.hpp>

namespace ht::engine::runtime {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::SizeMismatch: return "size mismatch";
    case ErrorCode::CollectiveMismatch: return "collective mismatch";
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::Aborted: return "aborted";
    case ErrorCode::UpstreamFailure: return "upstream failure";
    case ErrorCode::Misuse: return "misuse";
  }
  return "unknown";
}

}  // namespace ht::engine::runtime
