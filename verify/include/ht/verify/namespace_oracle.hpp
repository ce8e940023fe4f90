// The checkpoint namespaces of reference section 1.1 (with the DEV symbols C/H/W), written out
// as an oracle independent of patterns/symbols.cpp: which top-level namespaces each layer symbol
// owns, and whether a group's members collide (rule G5).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ht/patterns/pattern.hpp"

namespace ht::verify {

inline std::vector<std::string> owned_namespaces(char symbol) {
  switch (symbol) {
    case 'M': return {"mixer"};
    case '*':
    case 'G': return {"self_attention"};
    case '-': return {"mlp"};
    case 'E': return {"pre_mlp_layernorm", "mlp"};
    default: return {"input_layernorm", "self_attention"};  // D + C H W
  }
}

inline bool namespaces_collide(const patterns::Item& item) {
  std::set<std::string> seen;
  for (char c : item.symbols)
    for (const auto& ns : owned_namespaces(c))
      if (!seen.insert(ns).second) return true;
  return false;
}

}  // namespace ht::verify
