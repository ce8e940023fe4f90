// Enum <-> name tables of the schedule module (plan.cpp, config.cpp): one lookup each way over a
// constexpr array of (value, name) pairs. Internal to schedule/.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <utility>

namespace ht::schedule::detail {

template <typename E, std::size_t N>
std::optional<E> lookup(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view name) {
  for (const auto& [value, text] : table)
    if (text == name) return value;
  return std::nullopt;
}

template <typename E, std::size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E value) {
  for (const auto& [v, text] : table)
    if (v == value) return text;
  return "?";
}

}  // namespace ht::schedule::detail
