// rapidcheck generators of pipeline allocations that break exactly one rule of reference
// section 4 (R5-R8, G4): a valid pattern plus a PipelineConfig (and, for R6, the stage asked
// for) that allocate_stages / select_stage must reject with that rule. Built on pattern_gen.hpp.
#pragma once

#include <rapidcheck.h>

#include <optional>
#include <ostream>
#include <string>

#include "ht/patterns/pipeline.hpp"
#include "ht/verify/pattern_gen.hpp"

namespace ht::verify::gen {

struct PipelineViolation {
  std::string text;                 // a pattern that parses
  patterns::PipelineConfig config;
  std::optional<int> pp_rank;       // set: select_stage(pp_rank, vp_stage); unset: allocate_stages
  std::optional<int> vp_stage;
  std::string code;
};

inline void showValue(const PipelineViolation& v, std::ostream& os) {
  os << "'" << v.text << "' pp " << v.config.pp << " vpp " << v.config.vpp.value_or(0) << " expecting " << v.code;
}

inline patterns::PipelineConfig pipeline(int pp, std::optional<int> vpp = std::nullopt) {
  patterns::PipelineConfig c;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

// R5: at least two pipe segments together with a first or last stage layer count.
inline rc::Gen<PipelineViolation> r5_violation() {
  return rc::gen::exec([] {
    const int pp = *rc::gen::inRange(1, 4);
    const int vpp = *rc::gen::inRange(pp == 1 ? 2 : 1, 3);
    PipelineViolation v{(*piped_pattern(pp, vpp)).text(), pipeline(pp), {}, {}, "R5"};
    if (*rc::gen::arbitrary<bool>())
      v.config.first_stage_layers = *rc::gen::inRange(0, 4);
    else
      v.config.last_stage_layers = *rc::gen::inRange(0, 4);
    return v;
  });
}

// R6: a virtual stage asked of a pipe-less pattern on pp > 1.
inline rc::Gen<PipelineViolation> r6_violation() {
  return rc::gen::exec([] {
    const int pp = *rc::gen::inRange(2, 5);
    const int vpp = *rc::gen::inRange(2, 4);
    const std::string text = (*flat_pattern(pp * *rc::gen::inRange(1, 4))).text();
    return PipelineViolation{text, pipeline(pp, vpp), *rc::gen::inRange(0, pp), *rc::gen::inRange(0, vpp), "R6"};
  });
}

// R7: a legacy (pipe-less) even split with N % pp != 0.
inline rc::Gen<PipelineViolation> r7_violation() {
  return rc::gen::exec([] {
    const int pp = *rc::gen::inRange(2, 5);
    const int n = pp * *rc::gen::inRange(0, 4) + *rc::gen::inRange(1, pp);
    return PipelineViolation{(*flat_pattern(n)).text(), pipeline(pp), {}, {}, "R7"};
  });
}

// R8: more than one segment, and a segment count that pp does not divide.
inline rc::Gen<PipelineViolation> r8_violation() {
  return rc::gen::exec([] {
    const int pp = *rc::gen::inRange(2, 5);
    int segments = pp * *rc::gen::inRange(0, 3) + *rc::gen::inRange(1, pp);
    if (segments < 2) segments += pp;
    return PipelineViolation{(*piped_pattern(segments, 1)).text(), pipeline(pp), {}, {}, "R8"};
  });
}

// G4: a legacy split whose stage boundary falls inside a group: the two layers on either side
// of one boundary are merged into a valid group.
inline rc::Gen<PipelineViolation> g4_violation() {
  return rc::gen::exec([] {
    const int pp = *rc::gen::inRange(2, 5);
    const int per_rank = *rc::gen::inRange(1, 4);
    PatternModel m = *flat_pattern(pp * per_rank);
    const int boundary = per_rank * *rc::gen::inRange(1, pp);
    auto& items = m.segments[0];
    const std::string body = std::string(1, *rc::gen::element('M', 'G')) + *rc::gen::element('-', 'E');
    items.erase(items.begin() + boundary - 1, items.begin() + boundary + 1);
    items.insert(items.begin() + boundary - 1, Item{body, true, 0});
    return PipelineViolation{m.text(), pipeline(pp), {}, {}, "G4"};
  });
}

}  // namespace ht::verify::gen
