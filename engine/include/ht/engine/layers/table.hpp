// The engine's layer table: for each layer symbol the engine runs, the layer's parameters (their
// checkpoint names are its Params' visit), cache types, init, forward and backward functions
// (layers/*.hpp) and its pre-norm's name. HybridModel's branches (cpu/branch.cpp), the
// executor's members (exec/members.cpp) and the device branches (make_dev_branch in
// cuda/.../dev/model.hpp, which binds its device pointers by the same names) are all built from
// it, so a layer is wired once; which symbols the engine runs at all is the pattern's symbol
// table (patterns/symbols.hpp, engine_supported). Adding a layer type: its files under layers/
// (CPU) and dev/ (device, with its DevLayer entry), one case in with_layer and in prenorm_name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/gdn.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/engine/rng.hpp"
#include "ht/patterns/symbols.hpp"

namespace ht::engine::layers {

// The refusal of a symbol the engine does not run, naming it.
[[noreturn]] inline void unsupported_layer(char symbol) {
  const auto* info = patterns::find_symbol(symbol);
  throw EngineError(ErrorCode::Unsupported, std::string("layer symbol '") + symbol + "' (" +
                                                (info ? std::string(info->name) : std::string("unknown")) +
                                                ") is not implemented in the engine (supported: M G * W + - E)");
}

// One layer's functions over its Params P and Cache C:
//   init(P&, cfg, rng); forward(cfg, const P&, x, out, C&);
//   backward(cfg, const P&, const C&, x, dout, dx, P& grads, WgradSink<T>* wgrad)
// (dx and grads accumulate; a non-null wgrad takes the weight GEMMs, layers/wgrad.hpp).
template <class P, class C, class Init, class Fwd, class Bwd>
struct Ops {
  using Params = P;
  using Cache = C;
  Init init;
  Fwd forward;
  Bwd backward;
};
template <class P, class C, class Init, class Fwd, class Bwd>
Ops<P, C, Init, Fwd, Bwd> ops(Init init, Fwd fwd, Bwd bwd) {
  return {init, fwd, bwd};
}

// f(name, value, gradient) over a Params struct and its gradients, in the struct's order.
template <class T, class P, class F>
void visit_pairs(P& values, P& grads, const F& f) {
  std::vector<std::pair<std::string, Tensor<T>*>> v;
  std::vector<Tensor<T>*> g;
  P::visit(values, [&](const auto& name, Tensor<T>& t) { v.emplace_back(std::string(name), &t); });
  P::visit(grads, [&](const auto&, Tensor<T>& t) { g.push_back(&t); });
  for (std::size_t i = 0; i < v.size(); ++i) f(v[i].first, *v[i].second, *g[i]);
}

// Checkpoint name of the pre-norm the model applies before symbol's branch (the norm Megatron
// fuses into the first linear, or the separate layernorm module).
inline std::string prenorm_name(char symbol) {
  switch (symbol) {
    case 'M': return "mixer.in_proj.layer_norm_weight";
    case 'G': return "self_attention.in_proj.layer_norm_weight";
    case '*': return "self_attention.linear_qkv.layer_norm_weight";
    case '+':
    case 'W': return "input_layernorm.weight";
    case '-': return "mlp.linear_fc1.layer_norm_weight";
    case 'E': return "pre_mlp_layernorm.weight";
    default: unsupported_layer(symbol);
  }
}

// The key window of an attention symbol: 'W' attends to the last cfg.window keys (at least 1),
// '*' to all (0).
inline int window_of(char symbol, const ModelConfig& cfg) {
  if (symbol != 'W') return 0;
  if (cfg.window < 1) throw EngineError(ErrorCode::BadConfig, "'W' needs a window of at least 1 token");
  return cfg.window;
}

// visit(ops) with the entry of `symbol`, in T; its result is with_layer's. `loss_scale` scales
// the MoE router losses ('E' computes its weight gradients itself: its wgrad is ignored).
// Throws EngineError(Unsupported) for a symbol the table does not hold.
template <class T, class Visit>
auto with_layer(char symbol, const ModelConfig& cfg, T loss_scale, Visit&& visit) {
  switch (symbol) {
    case '*':
    case 'W': {
      const int window = window_of(symbol, cfg);
      return visit(ops<AttentionParams<T>, AttentionCache<T>>(
          [](AttentionParams<T>& p, const ModelConfig& c, Rng& r) { attention_init(p, c, r); },
          [window](const ModelConfig& c, const AttentionParams<T>& p, const Tensor<T>& x, Tensor<T>& out,
                   AttentionCache<T>& cache) { attention_forward(c, p, x, out, cache, window); },
          [window](const ModelConfig& c, const AttentionParams<T>& p, const AttentionCache<T>& cache, const Tensor<T>& x,
                   const Tensor<T>& dout, Tensor<T>& dx, AttentionParams<T>& g, WgradSink<T>* wgrad) {
            attention_backward(c, p, cache, x, dout, dx, g, window, wgrad);
          }));
    }
    case '-': return visit(ops<MlpParams<T>, MlpCache<T>>(&mlp_init<T>, &mlp_forward<T>, &mlp_backward<T>));
    case 'E':
      return visit(ops<MoeParams<T>, MoeCache<T>>(
          &moe_init<T>,
          [loss_scale](const ModelConfig& c, const MoeParams<T>& p, const Tensor<T>& x, Tensor<T>& out,
                       MoeCache<T>& cache) { moe_forward(c, p, x, out, cache, loss_scale); },
          [loss_scale](const ModelConfig& c, const MoeParams<T>& p, const MoeCache<T>& cache, const Tensor<T>& x,
                       const Tensor<T>& dout, Tensor<T>& dx, MoeParams<T>& g,
                       WgradSink<T>*) { moe_backward(c, p, cache, x, dout, dx, g, loss_scale); }));
    case 'M':
      return visit(ops<Mamba2Params<T>, Mamba2Cache<T>>(&mamba2_init<T>, &mamba2_forward<T>, &mamba2_backward<T>));
    case 'G': return visit(ops<GdnParams<T>, GdnCache<T>>(&gdn_init<T>, &gdn_forward<T>, &gdn_backward<T>));
    case '+': return visit(ops<MlaParams<T>, MlaCache<T>>(&mla_init<T>, &mla_forward<T>, &mla_backward<T>));
    default: unsupported_layer(symbol);
  }
}

}  // namespace ht::engine::layers
