// Executor members: the layer functions of layers/*.hpp behind an interface with external
// per-microbatch state (see members.hpp). Weights come from the same RNG streams as the
// HybridModel's branches, so an executor rank and a HybridModel built from the same seed hold
// the same bits.
#include "members.hpp"

#include <stdexcept>

#include "ht/engine/error.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/gdn.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/layers/swiglu.hpp"

namespace ht::engine::exec::detail {
namespace {

template <class P, class C, class Fwd, class Bwd>
class MixerMember final : public Member {
  struct State final : MemberState {
    C cache;
    P staged;
  };

 public:
  MixerMember(const ModelConfig& cfg, P p, Fwd fwd, Bwd bwd)
      : cfg_(cfg), p_(std::move(p)), g_(zeros_like(p_)), fwd_(fwd), bwd_(bwd) {}
  std::unique_ptr<MemberState> new_state() const override {
    auto s = std::make_unique<State>();
    s->staged = zeros_like(p_);
    return s;
  }
  void forward(const Tensor<float>& x, Tensor<float>& out, MemberState& s) const override {
    fwd_(cfg_, p_, x, out, static_cast<State&>(s).cache);
  }
  void backward(const Tensor<float>& x, const Tensor<float>& dout, Tensor<float>& dx,
                MemberState& s, WgradSink<float>* wgrad) const override {
    auto& st = static_cast<State&>(s);
    bwd_(cfg_, p_, st.cache, x, dout, dx, st.staged, wgrad);
  }
  void flush(MemberState& s) override { add_into(g_, static_cast<State&>(s).staged); }
  void for_each_param(const ParamFn& f) override {
    std::vector<std::pair<std::string, Tensor<float>*>> values;
    std::vector<Tensor<float>*> grads;
    P::visit(p_, [&](const auto& name, Tensor<float>& t) { values.emplace_back(std::string(name), &t); });
    P::visit(g_, [&](const auto&, Tensor<float>& t) { grads.push_back(&t); });
    for (std::size_t i = 0; i < values.size(); ++i) f(values[i].first, *values[i].second, *grads[i]);
  }

 private:
  ModelConfig cfg_;
  P p_, g_;
  Fwd fwd_;
  Bwd bwd_;
};

template <class P, class C, class Fwd, class Bwd>
std::unique_ptr<Member> wrap(const ModelConfig& cfg, P p, Fwd fwd, Bwd bwd) {
  return std::make_unique<MixerMember<P, C, Fwd, Bwd>>(cfg, std::move(p), fwd, bwd);
}

}  // namespace

void MoeLayer::for_each_param(const ParamFn& f) {
  std::vector<std::pair<std::string, Tensor<float>*>> values;
  std::vector<Tensor<float>*> grads;
  MoeParams<float>::visit(p, [&](const auto& name, Tensor<float>& t) { values.emplace_back(std::string(name), &t); });
  MoeParams<float>::visit(g, [&](const auto&, Tensor<float>& t) { grads.push_back(&t); });
  for (std::size_t i = 0; i < values.size(); ++i) f(values[i].first, *values[i].second, *grads[i]);
}

std::unique_ptr<Member> make_member(char symbol, const ModelConfig& cfg, Rng& rng) {
  using T = float;
  switch (symbol) {
    case '*':
    case 'W': {
      const int window = symbol == 'W' ? cfg.window : 0;
      AttentionParams<T> p;
      attention_init(p, cfg, rng);
      auto fwd = [window](const ModelConfig& c, const AttentionParams<T>& pp, const Tensor<T>& x,
                          Tensor<T>& out, AttentionCache<T>& cache) { attention_forward(c, pp, x, out, cache, window); };
      auto bwd = [window](const ModelConfig& c, const AttentionParams<T>& pp, const AttentionCache<T>& cache,
                          const Tensor<T>& x, const Tensor<T>& dout, Tensor<T>& dx, AttentionParams<T>& g,
                          WgradSink<T>* wgrad) {
        attention_backward(c, pp, cache, x, dout, dx, g, window, wgrad);
      };
      return wrap<AttentionParams<T>, AttentionCache<T>>(cfg, std::move(p), fwd, bwd);
    }
    case '-': {
      MlpParams<T> p;
      mlp_init(p, cfg, rng);
      return wrap<MlpParams<T>, MlpCache<T>>(cfg, std::move(p), &mlp_forward<T>, &mlp_backward<T>);
    }
    case 'M': {
      Mamba2Params<T> p;
      mamba2_init(p, cfg, rng);
      return wrap<Mamba2Params<T>, Mamba2Cache<T>>(cfg, std::move(p), &mamba2_forward<T>, &mamba2_backward<T>);
    }
    case 'G': {
      GdnParams<T> p;
      gdn_init(p, cfg, rng);
      return wrap<GdnParams<T>, GdnCache<T>>(cfg, std::move(p), &gdn_forward<T>, &gdn_backward<T>);
    }
    case '+': {
      MlaParams<T> p;
      mla_init(p, cfg, rng);
      return wrap<MlaParams<T>, MlaCache<T>>(cfg, std::move(p), &mla_forward<T>, &mla_backward<T>);
    }
    default:
      throw EngineError(ErrorCode::Unsupported,
                        std::string("layer symbol '") + symbol + "' is not implemented in the executor");
  }
}

}  // namespace ht::engine::exec::detail
