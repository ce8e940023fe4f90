// The verifier's named properties: each one pairs a generator of cases with a check against an
// independent oracle. A case is a small JSON object (pattern text and configuration) so that a
// shrunk counterexample can be written to a file and replayed exactly, without rapidcheck.
// The registry lists every property this build has (twin and engine properties only when their
// modules are built); names are stable, e.g. "pattern.rule.G5" or "engine.delay_wgrad".
#pragma once

#include <rapidcheck.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht::verify {

using Case = nlohmann::json;

// Thrown by a check when the case breaks the property; the message says what differed.
struct Falsified : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What `hybrid-twin fuzz --pattern P` fixes; everything else is generated.
struct FuzzContext {
  std::optional<std::string> pattern;
};

// A property's generator for one context, or the reason it does not apply (then it is skipped).
struct CaseSource {
  std::optional<rc::Gen<Case>> gen;
  std::string skip_reason;
};

struct Property {
  std::string name;     // stable: "<group>.<what>"
  std::string group;    // pattern | plan | twin | engine
  std::string summary;  // one line: the behaviour checked and its oracle
  std::function<CaseSource(const FuzzContext&)> cases;
  // Throws Falsified (or any exception: an unexpected error is a failure too).
  std::function<void(const Case&)> check;
};

// All properties of this build, in a fixed order (pattern, plan, twin, engine).
const std::vector<Property>& properties();
// nullptr when there is no property of that name.
const Property* find_property(const std::string& name);

// Helpers for writing checks.
[[noreturn]] void fail(const std::string& message);
inline void expect(bool condition, const char* what) {
  if (!condition) fail(what);
}

}  // namespace ht::verify
