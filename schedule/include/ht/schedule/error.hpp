// Typed errors of the schedule builder and of plan / model files. Configuration rejections carry
// the rule number of reference section 4 (O1, O2, ...); file and argument problems have their own
// codes. The CLI prints what() on one line and exits 2.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace ht::schedule {

enum class ErrorCode {
  O1_OverlapLayerShape,      // overlap cannot split a logical layer (terminal not last, pre-layer)
  O2_OverlapCudaGraphs,      // overlap together with CUDA graphs
  O3_OverlapHybridMtp,       // overlap together with an MTP pattern
  O7_OverlapConfig,          // overlap prerequisites: ep > 1, vpp with pp > 1, MTP depth <= 1
  O8_MtpInnerNotMoe,         // MTP inner layer is not MoE under overlap
  O10_DelayWgradNeedsOverlap,// delayed weight gradients without the overlap schedule
  DelayWgradLayer,           // delayed weight gradients with a layer type that cannot defer them
  BadConfig,                 // a parallel or schedule setting out of range
  BadModel,                  // model dimensions out of range or a malformed model file
  BadPlan,                   // a malformed, inconsistent or unsupported plan file
  BadLog,                    // a malformed or inconsistent measurement log (tokens per expert)
  Io,                        // a file could not be read or written
};

// Short stable code, e.g. "O2", "config", used in messages and JSON.
std::string_view error_code_text(ErrorCode code);

class ScheduleError : public std::runtime_error {
 public:
  // what() becomes "<code>: <message>", e.g. "O2: overlap ... cuda graphs ...".
  ScheduleError(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace ht::schedule
