// Finite-difference oracle shared by the engine's layer tests (float64, same templated layer
// code as float32). A test defines a scalar loss L = sum(out * probe) for a fixed random probe,
// runs the hand-written backward with dout = probe, and compares every analytic gradient entry
// with the central difference (L(x+h) - L(x-h)) / 2h.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine::test {

// Relative error with an absolute floor so that tiny gradients are compared absolutely:
// |a - n| / max(|a|, |n|, floor).
inline double rel_err(double analytic, double numeric, double floor = 1e-2) {
  return std::abs(analytic - numeric) / std::max({std::abs(analytic), std::abs(numeric), floor});
}

// Central differences of `loss` with respect to every entry of `x` (perturbed in place and
// restored). Returns the largest rel_err against `analytic`. With float64 and h = 1e-5 the
// truncation error is ~1e-10 and the rounding error ~1e-11 |L| / h; entries smaller than `floor`
// (default 1e-2) are therefore compared absolutely (error / floor), not relatively.
inline double max_fd_error(Tensor<double>& x, const Tensor<double>& analytic,
                           const std::function<double()>& loss, double h = 1e-5,
                           double floor = 1e-2) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    worst = std::max(worst, rel_err(analytic[i], (lp - lm) / (2 * h), floor));
  }
  return worst;
}

template <class T>
Tensor<T> random_tensor(std::vector<int> shape, Rng& rng, double scale = 1.0) {
  Tensor<T> t(std::move(shape));
  for (auto& v : t.data) v = static_cast<T>(rng.normal() * scale);
  return t;
}

inline double dot(const Tensor<double>& a, const Tensor<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace ht::engine::test
