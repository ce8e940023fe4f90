// rapidcheck generators of schedule inputs: parallel configs (EP, DP, PP, VPP, microbatches),
// schedule options (overlap, delayed wgrad, early release, routing skew) and patterns that fit
// them, as one PlanCase that build_plan must accept. `plan_case_for` keeps a user's pattern
// fixed and fuzzes only the configuration around it.
#pragma once

#include <rapidcheck.h>

#include <optional>
#include <ostream>
#include <string>
#include <tuple>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"

namespace ht::verify::gen {

struct PlanCase {
  std::string pattern;
  schedule::ParallelConfig config;
  schedule::ScheduleOptions options;
};

inline void showValue(const PlanCase& c, std::ostream& os) {
  os << "'" << c.pattern << "' ep " << c.config.ep << " dp " << c.config.dp << " pp " << c.config.pp << " vpp "
     << c.config.vpp << " mb " << c.config.microbatches << " overlap " << c.options.overlap << " delay "
     << c.options.delay_wgrad << " early " << c.options.early_attn_release;
}

// One logical layer whose members own disjoint namespaces and that the overlap can split.
inline rc::Gen<std::string> overlap_item() {
  return rc::gen::oneOf(
      rc::gen::element<std::string>("M", "*", "G", "-", "E"),
      rc::gen::map(rc::gen::tuple(rc::gen::element<std::string>("", "M", "*", "G", "M*", "MG"),
                                  rc::gen::element<std::string>("", "-", "E")),
                   [](const std::tuple<std::string, std::string>& t) {
                     std::string body = std::get<0>(t) + std::get<1>(t);
                     return body.empty() ? std::string("[*E]") : "[" + body + "]";
                   }));
}

inline rc::Gen<std::string> overlap_segment(int max_items = 2) {
  return rc::gen::exec([max_items] {
    std::string s;
    const int items = *rc::gen::inRange(0, max_items + 1);
    for (int i = 0; i < items; ++i) s += *overlap_item();
    return s;
  });
}

// EP in {1, 2, 4} with DP a multiple of it, overlap only where Megatron allows it (EP > 1; PP > 1
// needs VPP), microbatches a multiple of PP under interleaving.
inline rc::Gen<PlanCase> plan_case() {
  return rc::gen::exec([] {
    PlanCase c;
    const int ep = *rc::gen::element(1, 2, 4);
    c.config.ep = ep;
    c.config.dp = ep * *rc::gen::element(1, 2);
    c.config.pp = *rc::gen::inRange(1, 4);
    const bool overlap = ep > 1 && *rc::gen::arbitrary<bool>();
    if (c.config.pp > 1) c.config.vpp = overlap ? *rc::gen::inRange(1, 3) : *rc::gen::inRange(0, 3);
    if (c.config.pp > 1 && c.config.vpp > 0) {
      c.config.microbatches = c.config.pp * *rc::gen::inRange(1, 3);
    } else {
      c.config.microbatches = *rc::gen::inRange(1, 5);
    }
    const int segments = c.config.pp * c.config.model_chunks();
    for (int s = 0; s < segments; ++s) c.pattern += (s ? "|" : "") + *overlap_segment();
    if (c.pattern.find_first_of("M*G-E") == std::string::npos) c.pattern += "[*E]";
    if (!overlap && *rc::gen::inRange(0, 4) == 0) c.pattern += *rc::gen::element<std::string>("/*E", "/M-/M-");
    c.options.overlap = overlap;
    c.options.delay_wgrad = overlap && *rc::gen::arbitrary<bool>();
    c.options.early_attn_release = overlap && *rc::gen::arbitrary<bool>();
    c.options.routing_skew = *rc::gen::element(0.0, 0.5, 1.5);
    return c;
  });
}

// Combined 1F1B on one pipeline stage (the 13-step order of reference section 3.6): PP = 1,
// EP > 1, overlap on, no MTP.
inline rc::Gen<PlanCase> combined_1f1b_case() {
  return rc::gen::exec([] {
    PlanCase c;
    c.config.ep = *rc::gen::element(2, 4);
    c.config.dp = c.config.ep * *rc::gen::element(1, 2);
    c.config.microbatches = *rc::gen::inRange(1, 5);
    c.pattern = *overlap_segment(4);
    if (c.pattern.find('E') == std::string::npos) c.pattern += "[*E]";
    c.options.overlap = true;
    c.options.delay_wgrad = *rc::gen::arbitrary<bool>();
    c.options.early_attn_release = *rc::gen::arbitrary<bool>();
    return c;
  });
}

// Whether the overlap builder can split every logical layer (rule O1) and the pattern has no MTP
// (rule O3): only then may a fixed pattern be fuzzed with overlap on.
inline bool overlap_allowed(const patterns::ParsedPattern& p) {
  if (p.mtp_depths > 0) return false;
  for (const auto& item : p.items()) {
    const std::string& s = item.symbols;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const bool terminal = s[i] == '-' || s[i] == 'E';
      if (terminal && i + 1 != s.size()) return false;
      if (!terminal && std::string("M*DG+").find(s[i]) == std::string::npos) return false;
    }
  }
  return true;
}

// A fixed pattern with everything else fuzzed: PP from the divisors > 1 of its segment count (one
// segment: PP = 1), VPP = segments / PP, overlap only where the pattern allows it.
inline rc::Gen<PlanCase> plan_case_for(const patterns::ParsedPattern& p) {
  return rc::gen::exec([p] {
    PlanCase c;
    c.pattern = p.text;
    const int segments = std::max(1, p.segment_count());
    std::vector<int> pps;
    for (int d = 2; d <= segments; ++d)  // several segments need pp > 1 (VPP needs a pipeline)
      if (segments % d == 0) pps.push_back(d);
    c.config.pp = segments > 1 ? *rc::gen::elementOf(pps) : 1;
    if (segments > 1) c.config.vpp = segments / c.config.pp;
    const bool has_moe = p.flattened_symbols().find('E') != std::string::npos || p.mtp.find('E') != std::string::npos;
    const int ep = has_moe ? *rc::gen::element(1, 2, 4) : 1;
    c.config.ep = ep;
    c.config.dp = ep * *rc::gen::element(1, 2);
    c.config.microbatches = c.config.vpp > 0 ? c.config.pp * *rc::gen::inRange(1, 3) : *rc::gen::inRange(1, 5);
    const bool overlap = ep > 1 && overlap_allowed(p) && *rc::gen::arbitrary<bool>();
    c.options.overlap = overlap;
    c.options.delay_wgrad = overlap && *rc::gen::arbitrary<bool>();
    c.options.early_attn_release = overlap && *rc::gen::arbitrary<bool>();
    c.options.routing_skew = *rc::gen::element(0.0, 0.5, 1.5);
    return c;
  });
}

}  // namespace ht::verify::gen
