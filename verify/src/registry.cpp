// The registry of named properties (see property.hpp), assembled once from the groups this build
// has.
#include <algorithm>

#include "property_groups.hpp"

namespace ht::verify {

const std::vector<Property>& properties() {
  static const std::vector<Property> all = [] {
    std::vector<Property> out;
    detail::add_pattern_properties(out);
    detail::add_plan_properties(out);
    detail::add_layout_properties(out);
#ifdef HT_VERIFY_WITH_SIM
    detail::add_twin_properties(out);
#endif
#ifdef HT_VERIFY_WITH_ENGINE
    detail::add_engine_properties(out);
#endif
    return out;
  }();
  return all;
}

const Property* find_property(const std::string& name) {
  const auto& all = properties();
  const auto it = std::find_if(all.begin(), all.end(), [&](const Property& p) { return p.name == name; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace ht::verify
