// Error codes of ht::schedule (see error.hpp).
#include "ht/schedule/error.hpp"

namespace ht::schedule {

std::string_view error_code_text(ErrorCode code) {
  switch (code) {
    case ErrorCode::O1_OverlapLayerShape: return "O1";
    case ErrorCode::O2_OverlapCudaGraphs: return "O2";
    case ErrorCode::O3_OverlapHybridMtp: return "O3";
    case ErrorCode::O7_OverlapConfig: return "O7";
    case ErrorCode::O8_MtpInnerNotMoe: return "O8";
    case ErrorCode::O10_DelayWgradNeedsOverlap: return "O10";
    case ErrorCode::DelayWgradLayer: return "wgrad";
    case ErrorCode::BadConfig: return "config";
    case ErrorCode::BadModel: return "model";
    case ErrorCode::BadPlan: return "plan";
    case ErrorCode::BadLog: return "log";
    case ErrorCode::Io: return "io";
  }
  return "?";
}

ScheduleError::ScheduleError(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(error_code_text(code)) + ": " + message), code_(code) {}

}  // namespace ht::schedule
