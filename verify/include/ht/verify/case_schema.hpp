// What a replayed case may hold. Counterexample files are written by `hybrid-twin fuzz`, but a
// person may edit one (or hand over any file), and the checks trust their case the way they trust
// the generators: an `engine.router` case whose token count and `x` disagree would index past its
// arrays. validate_case checks every field against the domain the generators draw from (types,
// ranges, sizes that agree), widened to bounds at which any check still runs in seconds, and
// refuses unknown fields. Replay runs it before the check; a refusal is bad input (exit 2), not a
// property failure.
#pragma once

#include <stdexcept>
#include <string>

#include "ht/verify/property.hpp"

namespace ht::verify {

struct BadCase : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Throws BadCase naming the field, its value and the allowed range.
void validate_case(const Case& input);

}  // namespace ht::verify
