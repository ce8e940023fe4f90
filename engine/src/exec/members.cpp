// Executor members: the layers of the engine's layer table (layers/table.hpp) behind an interface
// with external per-microbatch state (see members.hpp). Weights come from the same RNG streams as the
// HybridModel's branches, so an executor rank and a HybridModel built from the same seed hold
// the same bits.
#include "members.hpp"


#include "ht/engine/error.hpp"
#include "ht/engine/layers/table.hpp"

namespace ht::engine::exec::detail {
namespace {

// A layer of the table (layers/table.hpp) as an executor member: its cache and staged gradients
// in the per-microbatch state.
template <class L>
class MixerMember final : public Member {
  using P = typename L::Params;
  struct State final : MemberState {
    typename L::Cache cache;
    P staged;
  };

 public:
  MixerMember(const ModelConfig& cfg, P p, L layer) : cfg_(cfg), p_(std::move(p)), g_(zeros_like(p_)), layer_(layer) {}
  std::unique_ptr<MemberState> new_state() const override {
    auto s = std::make_unique<State>();
    s->staged = zeros_like(p_);
    return s;
  }
  void forward(const Tensor<float>& x, Tensor<float>& out, MemberState& s) const override {
    layer_.forward(cfg_, p_, x, out, static_cast<State&>(s).cache);
  }
  void backward(const Tensor<float>& x, const Tensor<float>& dout, Tensor<float>& dx,
                MemberState& s, WgradSink<float>* wgrad) const override {
    auto& st = static_cast<State&>(s);
    layer_.backward(cfg_, p_, st.cache, x, dout, dx, st.staged, wgrad);
  }
  void flush(MemberState& s) override { add_into(g_, static_cast<State&>(s).staged); }
  void for_each_param(const ParamFn& f) override { layers::visit_pairs<float>(p_, g_, f); }

 private:
  ModelConfig cfg_;
  P p_, g_;
  L layer_;
};

}  // namespace

void MoeLayer::for_each_param(const ParamFn& f) { layers::visit_pairs<float>(p, g, f); }

std::unique_ptr<Member> make_member(char symbol, const ModelConfig& cfg, Rng& rng) {
  if (symbol == 'E')  // the executor drives the MoE pieces itself (MoeLayer)
    throw EngineError(ErrorCode::Unsupported, "layer symbol 'E' is not an executor member");
  return layers::with_layer<float>(symbol, cfg, 1.0f, [&](auto layer) -> std::unique_ptr<Member> {
    using L = decltype(layer);
    typename L::Params p;
    layer.init(p, cfg, rng);
    return std::make_unique<MixerMember<L>>(cfg, std::move(p), layer);
  });
}

}  // namespace ht::engine::exec::detail
