// Finite-difference harness for the sequence mixers ('M', 'G', '+'): runs a mixer's float64
// forward/backward once with a random probe as dout, then checks the gradient of every entry of
// the input and of every parameter (found through Params::visit) against extrapolated central
// differences of L = sum(out * probe). Used by test_mamba2.cpp, test_gdn.cpp, test_mla.cpp.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fd.hpp"
#include "ht/engine/config.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine::test {

// The numeric derivative is Richardson-extrapolated central differences,
//   n = (4 D(h/2) - D(h)) / 3,  D(s) = (L(x+s) - L(x-s)) / 2s,  h = 2e-5,
// whose truncation error is O(h^4): plain central differences (O(h^2)) were not enough near the
// l2-norm of a nearly-zero q/k head (|q| ~ 2e-3 gives third derivatives ~1e6). Rounding costs
// ~1e-16 |L| / h ~ 1e-11 absolute. The check is per entry:
//   |analytic - numeric| / max(|analytic|, |numeric|, floor) < bound,  floor = 1e-4,
// so entries at or above the floor are held to ~1e-7 by the numerics; bound = 1e-5 keeps a
// margin and still catches any wrong or missing term (those give O(1e-2..1) relative errors).
inline constexpr double kMixerFdBound = 1e-5;
inline constexpr double kMixerFdStep = 2e-5;
inline constexpr double kMixerFdFloor = 1e-4;

inline double richardson_fd_error(Tensor<double>& x, const Tensor<double>& analytic,
                                  const std::function<double()>& loss) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    auto central = [&](double s) {
      x[i] = keep + s;
      const double lp = loss();
      x[i] = keep - s;
      const double lm = loss();
      x[i] = keep;
      return (lp - lm) / (2 * s);
    };
    const double d1 = central(kMixerFdStep), d2 = central(kMixerFdStep / 2);
    worst = std::max(worst, rel_err(analytic[i], (4 * d2 - d1) / 3, kMixerFdFloor));
  }
  return worst;
}

struct FdResult {
  std::vector<std::pair<std::string, double>> per_tensor;  // "input" first, then parameters
  double worst() const {
    double w = 0;
    for (const auto& [name, e] : per_tensor) w = std::max(w, e);
    return w;
  }
  std::string describe() const {
    std::string s;
    char buf[64];
    for (const auto& [name, e] : per_tensor) {
      std::snprintf(buf, sizeof buf, "=%.2e ", e);
      s += name + buf;
    }
    return s;
  }
};

// Params must provide the static visit(self, f(name, tensor)) of the engine's layer convention.
// fwd(params, x, out) runs the forward (keeping its own cache); bwd(params, x, dout, dx, grads)
// runs the backward against the cache of the last fwd call.
template <class Params, class Fwd, class Bwd>
FdResult mixer_fd_check(Params& p, Tensor<double>& x, Rng& rng, Fwd fwd, Bwd bwd) {
  Tensor<double> out;
  fwd(p, x, out);
  Tensor<double> probe = random_tensor<double>(out.shape, rng);
  Params grads;
  std::vector<Tensor<double>*> ptensors, gtensors;
  std::vector<std::string> names;
  Params::visit(p, [&](const char* name, Tensor<double>& t) {
    names.emplace_back(name);
    ptensors.push_back(&t);
  });
  Params::visit(grads, [&](const char*, Tensor<double>& t) { gtensors.push_back(&t); });
  for (std::size_t i = 0; i < ptensors.size(); ++i) *gtensors[i] = Tensor<double>(ptensors[i]->shape);
  Tensor<double> dx(x.shape);
  bwd(p, x, probe, dx, grads);

  auto loss = [&] {
    Tensor<double> o;
    fwd(p, x, o);
    return dot(o, probe);
  };
  FdResult r;
  r.per_tensor.emplace_back("input", richardson_fd_error(x, dx, loss));
  for (std::size_t i = 0; i < ptensors.size(); ++i)
    r.per_tensor.emplace_back(names[i], richardson_fd_error(*ptensors[i], *gtensors[i], loss));
  return r;
}

// Moves every parameter away from its structured init (norm weights of 1, D of 1, ...) so that
// finite differences see generic values: adds normal(0, scale) noise to each entry.
template <class Params>
void perturb_params(Params& p, Rng& rng, double scale) {
  Params::visit(p, [&](const char*, Tensor<double>& t) {
    for (auto& v : t.data) v += rng.normal() * scale;
  });
}

}  // namespace ht::engine::test
