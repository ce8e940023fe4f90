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
//   n(h) = (4 D(h/2) - D(h)) / 3,  D(s) = (L(x+s) - L(x-s)) / 2s,
// with truncation error O(h^4) and rounding error ~1e-16 |L| / h. No single h suits every
// entry: near the l2-norm of an almost-zero GDN q/k head or the RMS of an almost-zero gated
// Mamba2 group the fifth derivative is huge (wants small h), while a loss of |L| ~ 10 makes the
// rounding of a small h visible on small entries (wants large h). So each entry is checked at
// h = 2e-4, 2e-5 and 2e-6 and passes when one of the estimates agrees:
//   |analytic - n| / max(|analytic|, |n|, floor) < bound,  floor = 1e-4,  bound = 1e-5.
// A wrong or missing backward term disagrees at every step size by O(1e-2..1) relative, so the
// extra chances only forgive numerical noise of the difference quotient.
inline constexpr double kMixerFdBound = 1e-5;
inline constexpr double kMixerFdSteps[3] = {2e-4, 2e-5, 2e-6};
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
    double best = 1e300;
    for (double h : kMixerFdSteps) {
      const double n = (4 * central(h / 2) - central(h)) / 3;
      best = std::min(best, rel_err(analytic[i], n, kMixerFdFloor));
    }
    worst = std::max(worst, best);
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
  // Grads start as a copy of the parameters (then zeroed), as the model does: a layer's visit
  // may depend on the variant its init chose (MLA's direct query projection).
  Params grads = p;
  std::vector<Tensor<double>*> ptensors, gtensors;
  std::vector<std::string> names;
  Params::visit(p, [&](const char* name, Tensor<double>& t) {
    names.emplace_back(name);
    ptensors.push_back(&t);
  });
  Params::visit(grads, [&](const char*, Tensor<double>& t) {
    t.zero();
    gtensors.push_back(&t);
  });
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
