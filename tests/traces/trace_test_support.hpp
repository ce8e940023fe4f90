// Shared helpers of the traces tests: fixture paths and microsecond comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <string>

namespace ht::traces::test {

inline std::string fixture(const std::string& name) { return std::string(HT_TRACES_FIXTURES) + "/" + name; }

// Hand-computed figures are exact microsecond decimals; the reader turns them into seconds with
// one rounding, so they must agree to far below the 1 ns resolution of a profile (1e-15 s here).
inline Approx us(double microseconds) { return Approx(microseconds * 1e-6).margin(1e-15).epsilon(0); }

}  // namespace ht::traces::test
