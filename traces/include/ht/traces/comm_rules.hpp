// Which device activity is communication: name rules for profiles that do not carry a role
// (Kineto / Chrome traces of real runs). Our own traces say the role explicitly and never
// reach these rules.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace ht::traces {

// One rule: a case-insensitive regex (RE2 syntax: no backreferences or lookaround) searched in the
// kernel / op name, and the kernel class a match is reported as (it becomes the span's category).
// RE2 matches in time linear in the name and never recurses, so a user's regex cannot hang or
// crash the reader whatever the names in the file ("(a+)+$", ".*nccl.*" on 50,000 characters).
struct CommRule {
  std::string kernel_class;
  std::string pattern;
};

// Defaults: NCCL kernels, generic collectives (all-to-all, all-reduce, all-gather,
// reduce-scatter), peer-to-peer copies, MoE dispatch/combine kernels of DeepEP, HybridEP, UCCL-EP,
// pplx and NVSHMEM-based ones, and torch.distributed CPU ops (c10d::, gloo:).
const std::vector<CommRule>& default_comm_rules();

inline constexpr std::size_t kMaxCommRegexLength = 1000;

class CommClassifier {
 public:
  CommClassifier();                                  // default_comm_rules()
  // One user rule, class "comm"; TraceError (Argument) when it is empty, longer than
  // kMaxCommRegexLength or does not compile within RE2's memory budget.
  explicit CommClassifier(const std::string& regex);
  // Kernel class of the first matching rule, nullopt for compute.
  std::optional<std::string> classify(std::string_view name) const;

 private:
  struct Compiled {
    std::string kernel_class;
    std::shared_ptr<const re2::RE2> regex;
  };
  std::vector<Compiled> rules_;
};

}  // namespace ht::traces
