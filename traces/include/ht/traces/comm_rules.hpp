// Which device activity is communication: name rules for profiles that do not carry a role
// (Kineto / Chrome traces of real runs). Our own traces say the role explicitly and never
// reach these rules.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace ht::traces {

// One rule: a case-insensitive ECMAScript regex searched in the kernel / op name, and the kernel
// class a match is reported as (it becomes the span's category).
struct CommRule {
  std::string kernel_class;
  std::string pattern;
};

// Defaults: NCCL kernels, generic collectives (all-to-all, all-reduce, all-gather,
// reduce-scatter), peer-to-peer copies, MoE dispatch/combine kernels of DeepEP, HybridEP, UCCL-EP,
// pplx and NVSHMEM-based ones, and torch.distributed CPU ops (c10d::, gloo:).
const std::vector<CommRule>& default_comm_rules();

class CommClassifier {
 public:
  CommClassifier();                                  // default_comm_rules()
  explicit CommClassifier(const std::string& regex); // one user rule, class "comm"; TraceError
                                                     // (Argument) when it does not compile
  // Kernel class of the first matching rule, nullopt for compute.
  std::optional<std::string> classify(std::string_view name) const;

 private:
  struct Compiled {
    std::string kernel_class;
    std::regex regex;
  };
  std::vector<Compiled> rules_;
};

}  // namespace ht::traces
