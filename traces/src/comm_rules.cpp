// Default comm name rules and their matcher; see comm_rules.hpp. The defaults are written from
// the kernel names these libraries print in profiles (ncclDevKernel_AllToAll..., deep_ep::
// intranode::dispatch<...>, hybrid_ep::..., "Memcpy PtoP (Device -> Device)", gloo:all_to_all).
#include "ht/traces/comm_rules.hpp"

#include <re2/re2.h>

#include "ht/traces/error.hpp"

namespace ht::traces {

const std::vector<CommRule>& default_comm_rules() {
  static const std::vector<CommRule> rules = {
      {"nccl", R"(nccl|rccl)"},
      {"deep_ep", R"(deep_?ep)"},
      {"hybrid_ep", R"(hybrid_?ep)"},
      {"uccl_ep", R"(uccl_?ep)"},
      {"pplx", R"(pplx)"},
      {"nvshmem", R"(nvshmem)"},
      {"all_to_all", R"(all_?to_?all|alltoall|(^|[^a-z0-9])a2a)"},
      {"collective", R"(all_?reduce|all_?gather|reduce_?scatter|userbuffers)"},
      {"p2p_copy", R"(memcpy ?ptop)"},
      {"torch_distributed", R"(^c10d::|^gloo:|^mpi:)"},
  };
  return rules;
}

namespace {
std::shared_ptr<const re2::RE2> compile(const std::string& pattern) {
  if (pattern.size() > kMaxCommRegexLength)
    throw TraceError(TraceErrorCode::Argument, "comm regex has " + std::to_string(pattern.size()) +
                                                   " characters, more than the limit of " +
                                                   std::to_string(kMaxCommRegexLength));
  re2::RE2::Options options;
  options.set_case_sensitive(false);
  options.set_log_errors(false);      // the error goes into the message, not onto stderr
  options.set_max_mem(16 << 20);      // bounds the compiled program ("a{1000}{1000}" fails)
  auto re = std::make_shared<const re2::RE2>(pattern, options);
  if (!re->ok())
    throw TraceError(TraceErrorCode::Argument, "invalid comm regex '" + pattern + "': " + re->error() +
                                                   " (RE2 syntax: no backreferences or lookaround)");
  return re;
}
}  // namespace

CommClassifier::CommClassifier() {
  // Compiled once per process: every trace read starts with a classifier, and RE2 programs are
  // immutable and safe to share between threads.
  static const std::vector<Compiled> defaults = [] {
    std::vector<Compiled> out;
    for (const CommRule& rule : default_comm_rules()) out.push_back({rule.kernel_class, compile(rule.pattern)});
    return out;
  }();
  rules_ = defaults;
}

CommClassifier::CommClassifier(const std::string& regex) {
  if (regex.empty()) throw TraceError(TraceErrorCode::Argument, "comm regex is empty");
  rules_.push_back({"comm", compile(regex)});
}

std::optional<std::string> CommClassifier::classify(std::string_view name) const {
  for (const Compiled& rule : rules_)
    if (re2::RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *rule.regex)) return rule.kernel_class;
  return std::nullopt;
}

}  // namespace ht::traces
