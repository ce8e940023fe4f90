// The property groups of the registry, one source file each. Twin and engine groups exist only in
// builds with those modules (HT_VERIFY_WITH_SIM, HT_VERIFY_WITH_ENGINE).
#pragma once

#include <vector>

#include "ht/verify/property.hpp"

namespace ht::verify::detail {

void add_pattern_properties(std::vector<Property>& out);
void add_plan_properties(std::vector<Property>& out);
void add_layout_properties(std::vector<Property>& out);
#ifdef HT_VERIFY_WITH_SIM
void add_twin_properties(std::vector<Property>& out);
#endif
#ifdef HT_VERIFY_WITH_ENGINE
void add_engine_properties(std::vector<Property>& out);
#endif

// A generator of one constant case (used when --pattern leaves nothing else to vary).
inline rc::Gen<Case> constant(Case c) { return rc::gen::just(std::move(c)); }

}  // namespace ht::verify::detail
