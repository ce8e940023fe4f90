// HybridModel's branches: each layer of the engine's layer table (layers/table.hpp) behind the
// Branch interface the model drives, and the name of the pre-norm before each symbol's branch.
#include "ht/engine/branch.hpp"

#include <vector>

#include "ht/engine/error.hpp"
#include "ht/engine/layers/table.hpp"

namespace ht::engine {
namespace {

// A layer of the table (layers/table.hpp) as the model's Branch: its parameters, gradients and the
// cache of its last forward. HybridModel computes every weight gradient inside the backward: the
// layers' WgradSink (layers/wgrad.hpp) stays null.
template <class T, class L>
class LayerBranch final : public Branch<T> {
  using P = typename L::Params;
  using C = typename L::Cache;

 public:
  LayerBranch(const ModelConfig& cfg, P params, L layer) : cfg_(cfg), p_(std::move(params)), g_(p_), layer_(layer) {
    P::visit(g_, [](const auto&, Tensor<T>& t) { t.zero(); });
  }
  void forward(const Tensor<T>& x, Tensor<T>& out) override { layer_.forward(cfg_, p_, x, out, cache_); }
  void backward(const Tensor<T>& x, const Tensor<T>& dout, Tensor<T>& dx) override {
    layer_.backward(cfg_, p_, cache_, x, dout, dx, g_, nullptr);
  }
  void for_each_param(const typename Branch<T>::ParamFn& f) override { layers::visit_pairs<T>(p_, g_, f); }
  T aux_loss() const override {
    if constexpr (requires(const C& c) { c.routing.aux_loss; }) return cache_.routing.aux_loss;
    return T(0);
  }
  T z_loss() const override {
    if constexpr (requires(const C& c) { c.routing.z_loss; }) return cache_.routing.z_loss;
    return T(0);
  }

 private:
  ModelConfig cfg_;
  P p_, g_;
  C cache_;
  L layer_;
};

}  // namespace

template <class T>
std::unique_ptr<Branch<T>> make_branch(char symbol, const ModelConfig& cfg, Rng& rng, T loss_scale) {
  return layers::with_layer<T>(symbol, cfg, loss_scale, [&](auto layer) -> std::unique_ptr<Branch<T>> {
    using L = decltype(layer);
    typename L::Params p;
    layer.init(p, cfg, rng);
    return std::make_unique<LayerBranch<T, L>>(cfg, std::move(p), layer);
  });
}

template std::unique_ptr<Branch<float>> make_branch<float>(char, const ModelConfig&, Rng&, float);
template std::unique_ptr<Branch<double>> make_branch<double>(char, const ModelConfig&, Rng&, double);

}  // namespace ht::engine
