// One physical layer's residual branch behind one interface, so the model can hold any mix of
// layer symbols: forward takes the pre-normed input (B, T, C) and returns the branch output
// (B, T, C); the model adds the residual. Each branch owns its parameters, their gradients and
// the cache of its last forward (one microbatch in flight).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ht/engine/config.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
class Branch {
 public:
  virtual ~Branch() = default;
  virtual void forward(const Tensor<T>& x, Tensor<T>& out) = 0;
  // dx and every parameter gradient accumulate (+=).
  virtual void backward(const Tensor<T>& x, const Tensor<T>& dout, Tensor<T>& dx) = 0;
  // Visits (name relative to "decoder.layers.L.", value, gradient) in a fixed order.
  using ParamFn = std::function<void(const std::string&, Tensor<T>&, Tensor<T>&)>;
  virtual void for_each_param(const ParamFn& f) = 0;
  // Router losses of the last forward (MoE only), already multiplied by their scale.
  virtual T aux_loss() const { return T(0); }
  virtual T z_loss() const { return T(0); }
};

// Builds the branch of `symbol` with parameters drawn from rng. `loss_scale` multiplies MoE
// router losses (1 in the trunk, 1/depths inside MTP). Throws EngineError(Unsupported) naming
// the symbol for D, C, H and for mixers whose implementation is not linked in.
template <class T>
std::unique_ptr<Branch<T>> make_branch(char symbol, const ModelConfig& cfg, Rng& rng,
                                       T loss_scale);

}  // namespace ht::engine
