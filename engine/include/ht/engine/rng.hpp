// Deterministic random numbers for parameter init and tests: splitmix64 bits and a Box-Muller
// normal written out by hand, because std::normal_distribution differs between standard
// libraries and the engine promises the same weights from the same seed everywhere.
// Streams are derived from (seed, a name) so a parameter's init does not depend on the order in
// which layers are built: grouped and flattened models get the same weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace ht::engine {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  // A stream keyed by a seed and a name (FNV-1a of the name mixed into the seed).
  Rng(std::uint64_t seed, std::string_view name) : state_(seed ^ fnv1a(name)) { next_u64(); }

  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 6.283185307179586 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }
  int below(int n) { return static_cast<int>(next_u64() % static_cast<std::uint64_t>(n)); }

  static std::uint64_t fnv1a(std::string_view s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
  }

 private:
  std::uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace ht::engine
