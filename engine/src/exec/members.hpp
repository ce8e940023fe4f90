// Executor-side physical layers (internal to engine/src/exec): the same layer functions the
// HybridModel's branches call, but with the per-microbatch state kept outside the layer, so two
// microbatches can be in flight on one rank, and with parameter gradients staged per microbatch.
// A backward given a WgradSink leaves its weight-gradient GEMMs to it (the W node of delayed
// wgrad runs them later into the same staging buffers, the same bits); flush adds the staging
// buffers to the parameter gradients.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/engine/tensor.hpp"

namespace ht::engine::exec::detail {

using ParamFn = std::function<void(const std::string&, Tensor<float>&, Tensor<float>&)>;

struct MemberState {
  virtual ~MemberState() = default;
};

// The residual branch of one physical layer other than 'E': forward on the pre-normed input,
// backward into dx (+=) and into the state's staged gradients (the weight GEMMs through `wgrad`
// when one is given); flush adds them to the parameter gradients.
class Member {
 public:
  virtual ~Member() = default;
  virtual std::unique_ptr<MemberState> new_state() const = 0;
  virtual void forward(const Tensor<float>& x, Tensor<float>& out, MemberState& s) const = 0;
  virtual void backward(const Tensor<float>& x, const Tensor<float>& dout, Tensor<float>& dx,
                        MemberState& s, WgradSink<float>* wgrad) const = 0;
  virtual void flush(MemberState& s) = 0;
  virtual void for_each_param(const ParamFn& f) = 0;
};

// Throws EngineError(Unsupported) for symbols the engine does not run; 'E' is not a Member.
std::unique_ptr<Member> make_member(char symbol, const ModelConfig& cfg, Rng& rng);

// 'E': parameters and staged gradients; the executor drives the MoE pieces itself.
struct MoeLayer {
  MoeParams<float> p, g;
  void for_each_param(const ParamFn& f);
};

// Adds every tensor of `src` into the matching tensor of `dst` (same Params layout).
template <class P>
void add_into(P& dst, P& src) {
  std::vector<Tensor<float>*> d, s;
  P::visit(dst, [&](const auto&, Tensor<float>& t) { d.push_back(&t); });
  P::visit(src, [&](const auto&, Tensor<float>& t) { s.push_back(&t); });
  for (std::size_t i = 0; i < d.size(); ++i)
    for (std::size_t j = 0; j < d[i]->size(); ++j) (*d[i])[j] += (*s[i])[j];
}

template <class P>
P zeros_like(const P& p) {
  P z = p;
  P::visit(z, [](const auto&, Tensor<float>& t) { t.zero(); });
  return z;
}

}  // namespace ht::engine::exec::detail
