// Shared helpers of the ht::patterns tests: catching a PatternError to check its rule code and
// caret position, building expected item lists from bracket notation, and printing pattern values
// in Catch2 failure messages. Tests compare against hand-computed cases from the reference.
#pragma once

#include <catch2/catch.hpp>

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/error.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/pipeline.hpp"

namespace ht::patterns::test {

// Runs `action`, which must throw a PatternError, and hands that error back for inspection.
template <class Action>
PatternError error_of(Action&& action) {
  try {
    action();
  } catch (const PatternError& e) {
    return e;
  }
  FAIL("expected a PatternError, but nothing was thrown");
  throw std::logic_error("unreachable");
}

// What a rejection must look like: the rule code ("G1") and the 0-based caret position (-1: none).
struct Rejection {
  std::string_view code;
  int position;
};

inline void check_rejection(const PatternError& e, Rejection expected) {
  INFO("error: " << e.what());
  CHECK(rule_code(e.rule()) == expected.code);
  CHECK(e.position() == expected.position);
}

inline void check_parse_rejects(std::string_view pattern, Rejection expected, ParseOptions options = {}) {
  INFO("pattern: '" << pattern << "'");
  const PatternError e = error_of([&] { (void)parse(pattern, options); });
  check_rejection(e, expected);
  CHECK(e.pattern() == pattern);
}

// Items from bracket notation, one item per string: "M" is a single layer, "[M*E]" a group.
inline std::vector<Item> items_of(std::initializer_list<std::string_view> spec) {
  std::vector<Item> out;
  for (std::string_view s : spec) {
    if (!s.empty() && s.front() == '[')
      out.push_back(Item{std::string(s.substr(1, s.size() - 2)), true, 0});
    else
      out.push_back(Item{std::string(s), false, 0});
  }
  return out;
}

inline std::string show(const Item& item) {
  return item.grouped ? "[" + item.symbols + "]" : item.symbols;
}

}  // namespace ht::patterns::test

namespace Catch {
template <>
struct StringMaker<ht::patterns::Item> {
  static std::string convert(const ht::patterns::Item& item) { return ht::patterns::test::show(item); }
};
}  // namespace Catch
