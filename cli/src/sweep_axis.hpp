// One --sweep axis, "KEY=V1,V2,...": the key and its values in order, every value non-empty.
// Apart from cmd_simulate.cpp so the fuzz target can drive it.
#pragma once

#include <string>
#include <vector>

namespace ht::cli {

struct Axis {
  std::string key;
  std::vector<std::string> values;
};
// Throws UsageError naming the text for a missing '=', key or value, or an empty value.
Axis parse_axis(const std::string& text);

}  // namespace ht::cli
