// The hybrid model's pieces on a device, over the CUDA layers (dev/*.hpp): the parameters mirrored
// from a host HybridModel<T> (DevParams: device values, gradients, AdamW moments, staging sets),
// one physical layer's branch and pre-norm residual block (DevBranch, DevBlock) picked by the
// layer table, and the device's GEMM rate. The device executor (dev/executor.hpp) runs a plan over
// them. Blocks find their weights by canonical name, so a grouped pattern and its flattened form
// run the same blocks in the same order. With D = Host this is the code a GPU runs, testable
// anywhere.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/engine/cuda/dev/attention.hpp"
#include "ht/engine/cuda/dev/basic.hpp"
#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/gdn.hpp"
#include "ht/engine/cuda/dev/mamba2.hpp"
#include "ht/engine/cuda/dev/mla.hpp"
#include "ht/engine/cuda/dev/moe.hpp"
#include "ht/engine/cuda/dev/swiglu.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/engine/layers/table.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/patterns/checkpoint.hpp"

namespace ht::engine::dev {

// One physical layer's branch on the device: x, out, dx (B, T, C); dx accumulates. A backward
// given a WgradSink hands it its weight GEMMs (the W node runs them, layers/wgrad.hpp); null: it
// computes them itself.
template <class D, class T>
struct DevBranch {
  virtual ~DevBranch() = default;
  virtual void forward(const T* x, T* out, int b, int t) = 0;
  virtual void backward(const T* x, const T* dout, T* dx, int b, int t, WgradSink<T>* wgrad) = 0;
  virtual T aux_loss() const { return T(0); }
  virtual T z_loss() const { return T(0); }
  // MoE only: the branch in the schedule's slot pieces (dev/moe.hpp). Forward part 0 routes and
  // permutes x, 1 runs the experts, 2 writes out; backward part 0 is the combine, 1 the experts,
  // 2 the router into dx. Running the parts in order is forward() / backward(), bit for bit.
  virtual void forward_part(int, const T*, T*, int, int) {}
  virtual void backward_part(int, const T*, const T*, T*, int, int, WgradSink<T>*) {}
};

// Device copies of the host model's parameters, by canonical name.
template <class D, class T>
class DevParams {
 public:
  explicit DevParams(std::vector<ParamRef<T>> refs) : refs_(std::move(refs)) {
    for (std::size_t i = 0; i < refs_.size(); ++i) {
      index_[refs_[i].canonical] = i;
      values_.push_back(upload<D>(refs_[i].value->ptr(), refs_[i].value->size()));
      wptr_.push_back(values_.back().get());
      Buf<D, T> g;
      g.assign_zero(refs_[i].grad->size());
      grads_.push_back(std::move(g));
    }
  }
  // Staging (the device executor's per-(microbatch, layer) gradients): the weights of `weights`
  // (not copied: its updates are seen here), zero gradients of their own for the parameters `which`
  // (indices; g() of another is refused); add_grads_to() adds them into `weights`' gradients. Only
  // w, g, zero_grad and add_grads_to apply to a staging set.
  struct Staging {};
  DevParams(DevParams& weights, Staging, const std::vector<std::size_t>& which)
      : refs_(weights.refs_), index_(weights.index_), wptr_(weights.wptr_) {
    grads_.resize(weights.grads_.size());
    for (const std::size_t i : which) grads_.at(i).assign_zero(weights.grads_.at(i).size());
  }
  // dst.g[i] += g[i] for the parameters `which` (indices), one thread per element.
  void add_grads_to(DevParams& dst, const std::vector<std::size_t>& which) const {
    for (const std::size_t i : which) {
      T* d = dst.grads_[i].get();
      const T* s = grads_[i].get();
      D::launch(static_cast<long>(grads_[i].size()), [=] HT_HD(long j) { d[j] += s[j]; });
    }
  }
  // Indices of the parameters whose canonical names start with `prefix` and, when `exclude` is
  // not empty, do not contain it.
  std::vector<std::size_t> indices(const std::string& prefix, const std::string& exclude = "") const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < refs_.size(); ++i) {
      const std::string& name = refs_[i].canonical;
      if (name.rfind(prefix, 0) == 0 && (exclude.empty() || name.find(exclude) == std::string::npos)) out.push_back(i);
    }
    return out;
  }
  const std::vector<ParamRef<T>>& refs() const { return refs_; }
  const T* w(const std::string& canonical) const { return wptr_[at(canonical)]; }
  T* g(const std::string& canonical) {
    Buf<D, T>& g = grads_[at(canonical)];
    if (g.size() == 0 && refs_[at(canonical)].grad->size() > 0)
      throw EngineError(ErrorCode::BadConfig, "parameter '" + canonical + "' has no gradient in this staging set");
    return g.get();
  }
  void zero_grad() {
    for (auto& g : grads_) D::fill_zero(g.get(), g.size());
  }
  void download_grads() {
    for (std::size_t i = 0; i < refs_.size(); ++i) D::download(refs_[i].grad->ptr(), grads_[i].get(), grads_[i].size());
  }
  void upload_params() {
    for (std::size_t i = 0; i < values_.size(); ++i) D::upload(values_[i].get(), refs_[i].value->ptr(), values_[i].size());
  }
  void download_params() {
    for (std::size_t i = 0; i < values_.size(); ++i) D::download(refs_[i].value->ptr(), values_[i].get(), values_[i].size());
  }
  std::size_t count() const { return refs_.size(); }
  T* grad_at(std::size_t i) { return grads_[i].get(); }
  std::size_t size_at(std::size_t i) const { return grads_[i].size(); }

  // AdamW with global-norm clipping on the device (optimizer.cpp's update, element for element:
  // with --fmad=false and IEEE sqrt and division it rounds like the CPU), in two pieces for the
  // device executor, whose norm sums over ranks. The moments live on the device; `state` keeps the
  // step count, and its moments only after download_optimizer_state(). sumsq_grads: `ss` continued
  // by the squared gradients of the parameters i with keep(i), in order (D::sumsq_acc: the CPU's
  // order on the host emulation, a fixed tree per parameter on the GPU).
  template <class Keep>
  double sumsq_grads(double ss, Keep&& keep) const {
    for (std::size_t i = 0; i < grads_.size(); ++i)
      if (keep(i)) ss = D::sumsq_acc(ss, grads_[i].get(), grads_[i].size());
    return ss;
  }
  static T clip_factor(const AdamWConfig& cfg, double norm) {
    return (cfg.clip_norm > 0 && norm > cfg.clip_norm) ? static_cast<T>(cfg.clip_norm / norm) : T(1);
  }
  void adamw_apply(const AdamWConfig& cfg, AdamWState<T>& state, T clip) {
    if (m_.size() != refs_.size()) {
      for (std::size_t i = m_.size(); i < refs_.size(); ++i) {
        Buf<D, T> m, v;
        m.assign_zero(values_[i].size());
        v.assign_zero(values_[i].size());
        m_.push_back(std::move(m));
        v_.push_back(std::move(v));
      }
    }
    ++state.step;
    const T b1 = static_cast<T>(cfg.beta1), b2 = static_cast<T>(cfg.beta2);
    const T bc1 = T(1) - static_cast<T>(std::pow(static_cast<double>(cfg.beta1), static_cast<double>(state.step)));
    const T bc2 = T(1) - static_cast<T>(std::pow(static_cast<double>(cfg.beta2), static_cast<double>(state.step)));
    const T lr = static_cast<T>(cfg.lr), eps = static_cast<T>(cfg.eps);
    for (std::size_t p = 0; p < refs_.size(); ++p) {
      const T wd = refs_[p].value->rank() >= 2 ? static_cast<T>(cfg.weight_decay) : T(0);
      T* val = values_[p].get();
      T* m = m_[p].get();
      T* v = v_[p].get();
      const T* grad = grads_[p].get();
      D::launch(static_cast<long>(values_[p].size()), [=] HT_HD(long i) {
        const T g = grad[i] * clip;
        m[i] = b1 * m[i] + (T(1) - b1) * g;
        v[i] = b2 * v[i] + (T(1) - b2) * g * g;
        const T mhat = m[i] / bc1, vhat = v[i] / bc2;
        val[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * val[i]);
      });
    }
  }
  // The device moments into `state` (by canonical name, as adamw_step on the host keeps them), and
  // back: for checkpoints and resume.
  void download_optimizer_state(AdamWState<T>& state) const {
    for (std::size_t p = 0; p < m_.size(); ++p) {
      auto& m = state.exp_avg[refs_[p].canonical];
      auto& v = state.exp_avg_sq[refs_[p].canonical];
      m = Tensor<T>(refs_[p].value->shape);
      v = Tensor<T>(refs_[p].value->shape);
      D::download(m.ptr(), m_[p].get(), m.size());
      D::download(v.ptr(), v_[p].get(), v.size());
    }
  }
  void upload_optimizer_state(const AdamWState<T>& state) {
    m_.clear();
    v_.clear();
    for (std::size_t p = 0; p < refs_.size(); ++p) {
      Buf<D, T> m, v;
      m.assign_zero(values_[p].size());
      v.assign_zero(values_[p].size());
      const auto mi = state.exp_avg.find(refs_[p].canonical), vi = state.exp_avg_sq.find(refs_[p].canonical);
      if (mi != state.exp_avg.end() && mi->second.size() == m.size()) D::upload(m.get(), mi->second.ptr(), m.size());
      if (vi != state.exp_avg_sq.end() && vi->second.size() == v.size()) D::upload(v.get(), vi->second.ptr(), v.size());
      m_.push_back(std::move(m));
      v_.push_back(std::move(v));
    }
  }

 private:
  std::size_t at(const std::string& canonical) const {
    const auto it = index_.find(canonical);
    if (it == index_.end()) throw EngineError(ErrorCode::BadConfig, "device: no parameter " + canonical);
    return it->second;
  }
  std::vector<ParamRef<T>> refs_;
  std::map<std::string, std::size_t> index_;
  std::vector<Buf<D, T>> values_, grads_, m_, v_;
  std::vector<const T*> wptr_;  // the weights: values_, or the weights of the set this one stages for
};

// Binds a device layer's weight and gradient pointer sets (W, G: structs whose members carry the
// names of the CPU layer's Params) to `p`'s copies of `pre` + the checkpoint names that Params'
// visit gives them: the names are written once, in the CPU layer's header (layers/*.hpp).
template <class D, class T>
struct ParamBinder {
  DevParams<D, T>& p;
  std::string pre;
  // visit(set, f) calls f(name, member) for every parameter of set (a Params::visit).
  template <class W, class G, class Visit>
  void operator()(W& w, G& g, Visit&& visit) const {
    visit(w, [&](const std::string& name, const T*& slot) { slot = p.w(pre + name); });
    visit(g, [&](const std::string& name, T*& slot) { slot = p.g(pre + name); });
  }
  template <class P, class W, class G>
  void all(W& w, G& g) const {
    (*this)(w, g, [](auto& set, auto&& f) { P::visit(set, f); });
  }
};

template <class D, class T>
class AttnBranchD final : public DevBranch<D, T> {
 public:
  AttnBranchD(const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, int window)
      : cfg_(cfg), window_(window) {
    ParamBinder<D, T>{p, pre}.template all<AttentionParams<T>>(w_, g_);
  }
  void forward(const T* x, T* out, int b, int t) override {
    attention_forward<D, T>(cfg_, w_, x, out, b, t, cfg_.hidden, cache_, window_);
  }
  void backward(const T* x, const T* dout, T* dx, int b, int t, WgradSink<T>* wgrad) override {
    attention_backward<D, T>(cfg_, w_, cache_, x, dout, dx, g_, b, t, cfg_.hidden, window_, wgrad);
  }

 private:
  ModelConfig cfg_;
  int window_;
  AttnW<T> w_;
  AttnGrad<T> g_;
  AttnCacheD<D, T> cache_;
};

template <class D, class T>
class MlpBranchD final : public DevBranch<D, T> {
 public:
  MlpBranchD(const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre) {
    w_.w = {nullptr, nullptr, cfg.hidden, cfg.ffn_hidden};
    ParamBinder<D, T>{p, pre}.template all<MlpParams<T>>(w_, g_);
  }
  void forward(const T* x, T* out, int b, int t) override { swiglu_forward<D, T>(out, cache_, x, b * t, w_.w); }
  void backward(const T* x, const T* dout, T* dx, int b, int t, WgradSink<T>* wgrad) override {
    swiglu_backward<D, T>(dx, g_.w, dout, x, b * t, w_.w, cache_, wgrad);
  }

 private:
  struct {
    SwiGLUW<T> w;  // MlpParams' shape: its visit reads .w
  } w_;
  struct {
    SwiGLUGrad<T> w;
  } g_;
  SwiGLUCacheD<D, T> cache_;
};

// The experts of an MoE layer one device rank holds: [first, first + count).
struct ExpertShard {
  int first = 0, count = 0;
};

// 'E', holding only its rank's experts (the device executor's expert parallelism): the experts
// piece runs them on the shard's rows, which the executor exchanges between ranks after
// route_permute and before combine.
template <class D, class T>
class MoeBranchD final : public DevBranch<D, T> {
 public:
  MoeBranchD(const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T loss_scale, ExpertShard shard)
      : cfg_(cfg), scale_(loss_scale) {
    shard_.first = shard.first;
    shard_.count = shard.count;
    w_.experts.resize(static_cast<std::size_t>(cfg.num_experts));
    g_.experts.resize(static_cast<std::size_t>(cfg.num_experts));
    w_.has_shared = g_.has_shared = cfg.moe_shared_ffn_hidden > 0;  // as moe_init
    for (auto& sw : w_.experts) sw = {nullptr, nullptr, cfg.hidden, cfg.moe_ffn_hidden};
    w_.shared = {nullptr, nullptr, cfg.hidden, cfg.moe_shared_ffn_hidden};
    // MoeParams' names, the experts of the shard only.
    ParamBinder<D, T>{p, pre}(w_, g_, [&](auto& set, auto&& f) {
      MoeParams<T>::visit(set, [&](const std::string& name, auto& slot) {
        const int e = exec::expert_index(name);
        if (e < 0 || (e >= shard.first && e < shard.first + shard.count)) f(name, slot);
      });
    });
  }
  void forward(const T* x, T* out, int b, int t) override {
    for (int part = 0; part < 3; ++part) forward_part(part, x, out, b, t);
  }
  void backward(const T* x, const T* dout, T* dx, int b, int t, WgradSink<T>* wgrad) override {
    for (int part = 0; part < 3; ++part) backward_part(part, x, dout, dx, b, t, wgrad);
  }
  void forward_part(int part, const T* x, T* out, int b, int t) override {
    const int c = cfg_.hidden;
    if (part == 0) moe_route_permute<D, T>(cfg_, w_, x, b * t, c, cache_, scale_);
    if (part == 1) {
      shard_.out.assign_zero(static_cast<std::size_t>(shard_.rows()) * c);
      experts_forward<D, T>(w_, shard_.first, shard_.start, shard_.in.get(), shard_.out.get(), c, shard_.caches);
    }
    if (part == 2) moe_combine_forward<D, T>(w_, out, c, cache_);
  }
  // Part 0's sink takes the shared expert's weight GEMMs, part 1's the experts'.
  void backward_part(int part, const T* x, const T* dout, T* dx, int, int, WgradSink<T>* wgrad) override {
    const int c = cfg_.hidden;
    if (part == 0) moe_combine_backward<D, T>(w_, x, dout, dx, g_, c, cache_, wgrad);
    if (part == 1) {
      shard_.din.assign_zero(static_cast<std::size_t>(shard_.rows()) * c);
      experts_backward<D, T>(w_, g_, shard_.first, shard_.start, shard_.in.get(), shard_.dout.get(), shard_.din.get(), c,
                             shard_.caches, wgrad);
    }
    if (part == 2) moe_route_permute_backward<D, T>(cfg_, w_, x, dx, g_, c, scale_, cache_);
  }
  T aux_loss() const override { return cache_.aux_loss; }
  T z_loss() const override { return cache_.z_loss; }
  MoeCacheD<D, T>& cache() { return cache_; }
  MoeShardD<D, T>& shard() { return shard_; }

 private:
  ModelConfig cfg_;
  T scale_;
  MoeW<T> w_;
  MoeGrad<T> g_;
  MoeCacheD<D, T> cache_;
  MoeShardD<D, T> shard_;
};

// The mixers (Mamba2, GDN, MLA) share one adapter: their forward and backward take the same
// arguments; their pointer sets are bound by the names of their CPU Params P.
template <class D, class T, class P, class W, class G, class C, auto Fwd, auto Bwd>
class MixerBranchD final : public DevBranch<D, T> {
 public:
  MixerBranchD(const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre) : cfg_(cfg) {
    // MLA: which q path the names follow (mla_init's choice) before they are bound.
    if constexpr (requires { w_.direct; }) w_.direct = g_.direct = cfg.mla_q_lora_rank == 0;
    ParamBinder<D, T>{p, pre}.template all<P>(w_, g_);
  }
  void forward(const T* x, T* out, int b, int t) override { Fwd(cfg_, w_, x, out, b, t, cfg_.hidden, cache_); }
  void backward(const T* x, const T* dout, T* dx, int b, int t, WgradSink<T>* wgrad) override {
    Bwd(cfg_, w_, cache_, x, dout, dx, g_, b, t, cfg_.hidden, wgrad);
  }

 private:
  ModelConfig cfg_;
  W w_;
  G g_;
  C cache_;
};

// The device side of the layer table (layers/table.hpp): the device branch of the layer whose CPU
// Params type is P. The table picks P from the symbol; a layer the CPU runs without a
// specialisation here does not compile.
template <class D, class T, class P>
struct DevLayer;
template <class D, class T>
struct DevLayer<D, T, AttentionParams<T>> {
  static auto make(char symbol, const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T, ExpertShard) {
    return std::make_unique<AttnBranchD<D, T>>(cfg, p, pre, layers::window_of(symbol, cfg));
  }
};
template <class D, class T>
struct DevLayer<D, T, MlpParams<T>> {
  static auto make(char, const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T, ExpertShard) {
    return std::make_unique<MlpBranchD<D, T>>(cfg, p, pre);
  }
};
template <class D, class T>
struct DevLayer<D, T, MoeParams<T>> {
  static auto make(char, const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T loss_scale,
                   ExpertShard shard) {
    return std::make_unique<MoeBranchD<D, T>>(cfg, p, pre, loss_scale, shard);
  }
};
template <class D, class T, class P, class W, class G, class C, auto Fwd, auto Bwd>
struct DevMixer {
  static auto make(char, const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T, ExpertShard) {
    return std::make_unique<MixerBranchD<D, T, P, W, G, C, Fwd, Bwd>>(cfg, p, pre);
  }
};
template <class D, class T>
struct DevLayer<D, T, Mamba2Params<T>> : DevMixer<D, T, Mamba2Params<T>, Mamba2W<T>, Mamba2Grad<T>, Mamba2CacheD<D, T>,
                                                  &mamba2_forward<D, T>, &mamba2_backward<D, T>> {};
template <class D, class T>
struct DevLayer<D, T, GdnParams<T>>
    : DevMixer<D, T, GdnParams<T>, GdnW<T>, GdnGrad<T>, GdnCacheD<D, T>, &gdn_forward<D, T>, &gdn_backward<D, T>> {};
template <class D, class T>
struct DevLayer<D, T, MlaParams<T>>
    : DevMixer<D, T, MlaParams<T>, MlaW<T>, MlaGrad<T>, MlaCacheD<D, T>, &mla_forward<D, T>, &mla_backward<D, T>> {};

// The device branch of `symbol`: the layer table (layers::with_layer) picks the layer, DevLayer
// its device code. A symbol the engine does not run is refused by name.
template <class D, class T>
std::unique_ptr<DevBranch<D, T>> make_dev_branch(char symbol, const ModelConfig& cfg, DevParams<D, T>& p,
                                                 const std::string& pre, T loss_scale, ExpertShard shard = {}) {
  return layers::with_layer<T>(symbol, cfg, loss_scale, [&](auto ops) -> std::unique_ptr<DevBranch<D, T>> {
    using P = typename decltype(ops)::Params;
    return DevLayer<D, T, P>::make(symbol, cfg, p, pre, loss_scale, shard);
  });
}

// One physical layer on the device, h_out = h + branch(rmsnorm(h)) (the CPU's Block), with its
// per-microbatch buffers: the device executor holds one per layer and microbatch in flight.
template <class D, class T>
struct DevBlock {
  char symbol = 0;
  const T* norm_w = nullptr;
  T* norm_g = nullptr;
  std::unique_ptr<DevBranch<D, T>> branch;
  Buf<D, T> h_in, normed, out, rstd;

  void forward(Buf<D, T>& h, T eps, int b, int t, int c) {
    const std::size_t nc = h.size();
    const int n = b * t;
    h_in.resize(nc);
    D::copy(h_in.get(), h.get(), nc);
    normed.resize(nc);
    out.resize(nc);
    rstd.resize(static_cast<std::size_t>(n));
    rmsnorm_forward<D, T>(normed.get(), rstd.get(), h_in.get(), norm_w, n, c, eps);
    branch->forward(normed.get(), out.get(), b, t);
    add_inplace<D, T>(h.get(), out.get(), static_cast<long>(nc));
  }
  // A MoE block in the three slot pieces of DevBranch::forward_part; in order they are forward().
  void forward_part(int part, Buf<D, T>& h, T eps, int b, int t, int c) {
    const std::size_t nc = h.size();
    if (part == 0) {
      h_in.resize(nc);
      D::copy(h_in.get(), h.get(), nc);
      normed.resize(nc);
      out.resize(nc);
      rstd.resize(static_cast<std::size_t>(b) * t);
      rmsnorm_forward<D, T>(normed.get(), rstd.get(), h_in.get(), norm_w, b * t, c, eps);
    }
    branch->forward_part(part, normed.get(), out.get(), b, t);
    if (part == 2) add_inplace<D, T>(h.get(), out.get(), static_cast<long>(nc));
  }
  void backward_part(int part, Buf<D, T>& dh, int b, int t, int c, WgradSink<T>* wgrad = nullptr) {
    if (part == 0) dnormed.assign_zero(dh.size());
    branch->backward_part(part, normed.get(), dh.get(), dnormed.get(), b, t, wgrad);
    if (part == 2) rmsnorm_backward<D, T>(dh.get(), norm_g, dnormed.get(), h_in.get(), norm_w, rstd.get(), b * t, c);
  }
  Buf<D, T> dnormed;
  // dh holds d(h_out) on entry and d(h_in) on return.
  void backward(Buf<D, T>& dh, int b, int t, int c, WgradSink<T>* wgrad = nullptr) {
    dnormed.assign_zero(dh.size());
    branch->backward(normed.get(), dh.get(), dnormed.get(), b, t, wgrad);
    rmsnorm_backward<D, T>(dh.get(), norm_g, dnormed.get(), h_in.get(), norm_w, rstd.get(), b * t, c);
  }
};

template <class D, class T>
DevBlock<D, T> make_dev_block(char sym, const ModelConfig& cfg, DevParams<D, T>& params, const std::string& pre,
                              T loss_scale, ExpertShard shard = {}) {
  DevBlock<D, T> blk;
  blk.symbol = sym;
  const std::string norm = pre + layers::prenorm_name(sym);
  blk.norm_w = params.w(norm);
  blk.norm_g = params.g(norm);
  blk.branch = make_dev_branch<D, T>(sym, cfg, params, pre, loss_scale, shard);
  return blk;
}

}  // namespace ht::engine::dev

#include <algorithm>
#include <chrono>

#include "ht/engine/cuda/device_checks.hpp"

namespace ht::engine::dev {

// measure_gemm_tflops_* (device_checks.hpp) for a policy D.
template <class D>
double measure_gemm_tflops(int n, int reps) {
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  std::vector<float> host(nn);
  for (std::size_t i = 0; i < nn; ++i) host[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  const Buf<D, float> a = upload<D>(host.data(), nn), b = upload<D>(host.data(), nn);
  Buf<D, float> c(nn);
  D::gemm(c.get(), a.get(), b.get(), n, n, n, false, false, false);  // warm-up
  D::synchronize();
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    D::gemm(c.get(), a.get(), b.get(), n, n, n, false, false, false);
    D::synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * static_cast<double>(n) * n / s / 1e12);
  }
  return best;
}

}  // namespace ht::engine::dev
