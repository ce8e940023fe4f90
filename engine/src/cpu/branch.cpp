// Adapters from the layer functions (layers/*.hpp: X_init / X_forward / X_backward over
// XParams / XCache) to the Branch interface the model drives, and the symbol -> layer table of
// the engine. Which symbols the engine runs is decided here and nowhere else.
#include "ht/engine/branch.hpp"

#include <vector>

#include "ht/engine/error.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/gdn.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/patterns/symbols.hpp"

namespace ht::engine {
namespace {

// P: the layer's Params struct (with static visit), C: its Cache, Fwd/Bwd: callables
// fwd(cfg, p, x, out, cache) and bwd(cfg, p, cache, x, dout, dx, grads). HybridModel computes
// every weight gradient inside the backward: the layers' WgradSink (layers/wgrad.hpp) stays null.
template <class T, class P, class C, class Fwd, class Bwd>
class LayerBranch final : public Branch<T> {
 public:
  LayerBranch(const ModelConfig& cfg, P params, Fwd fwd, Bwd bwd)
      : cfg_(cfg), p_(std::move(params)), g_(p_), fwd_(fwd), bwd_(bwd) {
    P::visit(g_, [](const auto&, Tensor<T>& t) { t.zero(); });
  }
  void forward(const Tensor<T>& x, Tensor<T>& out) override { fwd_(cfg_, p_, x, out, cache_); }
  void backward(const Tensor<T>& x, const Tensor<T>& dout, Tensor<T>& dx) override {
    bwd_(cfg_, p_, cache_, x, dout, dx, g_);
  }
  void for_each_param(const typename Branch<T>::ParamFn& f) override {
    std::vector<std::pair<std::string, Tensor<T>*>> values;
    std::vector<Tensor<T>*> grads;
    P::visit(p_, [&](const auto& name, Tensor<T>& t) { values.emplace_back(std::string(name), &t); });
    P::visit(g_, [&](const auto&, Tensor<T>& t) { grads.push_back(&t); });
    for (std::size_t i = 0; i < values.size(); ++i) f(values[i].first, *values[i].second, *grads[i]);
  }
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
  Fwd fwd_;
  Bwd bwd_;
};

template <class T, class P, class C, class Fwd, class Bwd>
std::unique_ptr<Branch<T>> wrap(const ModelConfig& cfg, P params, Fwd fwd, Bwd bwd) {
  return std::make_unique<LayerBranch<T, P, C, Fwd, Bwd>>(cfg, std::move(params), fwd, bwd);
}

[[noreturn]] void unsupported(char symbol) {
  const auto* info = patterns::find_symbol(symbol);
  const std::string name = info ? std::string(info->name) : std::string("unknown");
  throw EngineError(ErrorCode::Unsupported,
                    std::string("layer symbol '") + symbol + "' (" + name +
                        ") is not implemented in the engine (supported: M G * W + - E)");
}

}  // namespace

std::string prenorm_name(char symbol) {
  switch (symbol) {
    case 'M': return "mixer.in_proj.layer_norm_weight";
    case 'G': return "self_attention.in_proj.layer_norm_weight";
    case '*': return "self_attention.linear_qkv.layer_norm_weight";
    case '+':
    case 'W': return "input_layernorm.weight";
    case '-': return "mlp.linear_fc1.layer_norm_weight";
    case 'E': return "pre_mlp_layernorm.weight";
    default: unsupported(symbol);
  }
}

template <class T>
std::unique_ptr<Branch<T>> make_branch(char symbol, const ModelConfig& cfg, Rng& rng,
                                       T loss_scale) {
  switch (symbol) {
    case '*':
    case 'W': {
      // '*' is full causal; 'W' is the same attention restricted to the last cfg.window keys.
      const int window = symbol == 'W' ? cfg.window : 0;
      if (symbol == 'W' && window < 1)
        throw EngineError(ErrorCode::BadConfig, "'W' needs a window of at least 1 token");
      AttentionParams<T> p;
      attention_init(p, cfg, rng);
      auto fwd = [window](const ModelConfig& c, const AttentionParams<T>& pp, const Tensor<T>& x,
                          Tensor<T>& out, AttentionCache<T>& cache) {
        attention_forward(c, pp, x, out, cache, window);
      };
      auto bwd = [window](const ModelConfig& c, const AttentionParams<T>& pp,
                          const AttentionCache<T>& cache, const Tensor<T>& x,
                          const Tensor<T>& dout, Tensor<T>& dx, AttentionParams<T>& g) {
        attention_backward(c, pp, cache, x, dout, dx, g, window);
      };
      return wrap<T, AttentionParams<T>, AttentionCache<T>>(cfg, std::move(p), fwd, bwd);
    }
    case '-': {
      MlpParams<T> p;
      mlp_init(p, cfg, rng);
      return wrap<T, MlpParams<T>, MlpCache<T>>(cfg, std::move(p), &mlp_forward<T>,
                                                [](auto&... a) { mlp_backward<T>(a...); });
    }
    case 'E': {
      MoeParams<T> p;
      moe_init(p, cfg, rng);
      auto fwd = [loss_scale](const ModelConfig& c, const MoeParams<T>& pp, const Tensor<T>& x,
                              Tensor<T>& out, MoeCache<T>& cache) {
        moe_forward(c, pp, x, out, cache, loss_scale);
      };
      auto bwd = [loss_scale](const ModelConfig& c, const MoeParams<T>& pp,
                              const MoeCache<T>& cache, const Tensor<T>& x, const Tensor<T>& dout,
                              Tensor<T>& dx, MoeParams<T>& g) {
        moe_backward(c, pp, cache, x, dout, dx, g, loss_scale);
      };
      return wrap<T, MoeParams<T>, MoeCache<T>>(cfg, std::move(p), fwd, bwd);
    }
    case 'M': {
      Mamba2Params<T> p;
      mamba2_init(p, cfg, rng);
      return wrap<T, Mamba2Params<T>, Mamba2Cache<T>>(cfg, std::move(p), &mamba2_forward<T>,
                                                      [](auto&... a) { mamba2_backward<T>(a...); });
    }
    case 'G': {
      GdnParams<T> p;
      gdn_init(p, cfg, rng);
      return wrap<T, GdnParams<T>, GdnCache<T>>(cfg, std::move(p), &gdn_forward<T>,
                                                [](auto&... a) { gdn_backward<T>(a...); });
    }
    case '+': {
      MlaParams<T> p;
      mla_init(p, cfg, rng);
      return wrap<T, MlaParams<T>, MlaCache<T>>(cfg, std::move(p), &mla_forward<T>,
                                                [](auto&... a) { mla_backward<T>(a...); });
    }
    default: unsupported(symbol);
  }
}

template std::unique_ptr<Branch<float>> make_branch<float>(char, const ModelConfig&, Rng&, float);
template std::unique_ptr<Branch<double>> make_branch<double>(char, const ModelConfig&, Rng&,
                                                             double);

}  // namespace ht::engine
