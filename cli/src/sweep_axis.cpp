// --sweep axes (see sweep_axis.hpp).
#include "sweep_axis.hpp"

#include <algorithm>

#include "command.hpp"

namespace ht::cli {

Axis parse_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw UsageError("--sweep expects KEY=V1,V2,..., got '" + text + "'");
  Axis a{text.substr(0, eq), {}};
  const std::string values = text.substr(eq + 1);
  const std::string shown = values.size() > 60 ? values.substr(0, 60) + "..." : values;
  for (std::size_t begin = 0; begin <= values.size();) {
    const std::size_t comma = std::min(values.find(',', begin), values.size());
    if (comma == begin) throw UsageError("--sweep " + a.key + " has an empty value in '" + shown + "'");
    a.values.push_back(values.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return a;
}


}  // namespace ht::cli
