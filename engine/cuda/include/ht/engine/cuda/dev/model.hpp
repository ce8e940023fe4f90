// The hybrid model on a device: HybridModel's forward and backward (model.cpp: pre-norm residual
// blocks, final norm, output layer, cross-entropy, MTP depths sharing embedding and output
// layer) over the CUDA layers (dev/*.hpp), for one microbatch at a time, sequentially.
//
// It mirrors a host HybridModel<T> that owns the pattern and the weights: the constructor uploads
// every parameter, download_grads() writes the device gradients into the host model's gradient
// tensors and upload_params() sends updated weights back, for an optimizer step on the host; or
// adamw_step() updates the weights on the device and download_params() brings them back.
// Blocks find their weights by canonical name, so a grouped pattern and its flattened form run
// the same blocks in the same order: their losses and gradients are equal bit for bit on one
// device, as on the CPU. With D = Host this is the code a GPU runs, testable anywhere.
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
  virtual bool has_parts() const { return false; }
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
  // w, g, has, dim, zero_grad and add_grads_to apply to a staging set.
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
  int dim(const std::string& canonical, int i) const { return refs_[at(canonical)].value->dim(i); }
  bool has(const std::string& canonical) const { return index_.count(canonical) > 0; }
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
  // with --fmad=false and IEEE sqrt and division it rounds like the CPU). The moments live on the
  // device; `state` keeps the step count, and its moments only after download_optimizer_state().
  // The norm: D::sumsq_acc continues one running float64 sum over the parameters in order -- the
  // CPU's order on the host emulation, a fixed tree per parameter on the GPU.
  double adamw_step(const AdamWConfig& cfg, AdamWState<T>& state) {
    const double norm = std::sqrt(sumsq_grads(0.0, [](std::size_t) { return true; }));
    adamw_apply(cfg, state, clip_factor(cfg, norm));
    return norm;
  }
  // The pieces of adamw_step, for the device executor (whose norm sums over ranks): `ss` continued
  // by the squared gradients of the parameters i with keep(i), in order.
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
    if (it == index_.end()) throw EngineError(ErrorCode::BadConfig, "device model: no parameter " + canonical);
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

// The experts of an MoE layer one device rank holds: [first, first + count); count < 0: all.
struct ExpertShard {
  int first = 0, count = -1;
};

// 'E'. With a shard (the device executor's expert parallelism) it holds only the rank's experts,
// and the experts piece runs them on the shard's rows, which the executor exchanges between ranks
// after route_permute and before combine.
template <class D, class T>
class MoeBranchD final : public DevBranch<D, T> {
 public:
  MoeBranchD(const ModelConfig& cfg, DevParams<D, T>& p, const std::string& pre, T loss_scale, ExpertShard shard = {})
      : cfg_(cfg), scale_(loss_scale) {
    sharded_ = shard.count >= 0;
    if (!sharded_) shard.count = cfg.num_experts;
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
  bool has_parts() const override { return true; }
  void forward_part(int part, const T* x, T* out, int b, int t) override {
    const int c = cfg_.hidden;
    if (part == 0) moe_route_permute<D, T>(cfg_, w_, x, b * t, c, cache_, scale_);
    if (part == 1 && !sharded_) moe_experts_forward<D, T>(w_, c, cache_);
    if (part == 1 && sharded_) {
      shard_.out.assign_zero(static_cast<std::size_t>(shard_.rows()) * c);
      experts_forward<D, T>(w_, shard_.first, shard_.start, shard_.in.get(), shard_.out.get(), c, shard_.caches);
    }
    if (part == 2) moe_combine_forward<D, T>(w_, out, c, cache_);
  }
  // Part 0's sink takes the shared expert's weight GEMMs, part 1's the experts'.
  void backward_part(int part, const T* x, const T* dout, T* dx, int, int, WgradSink<T>* wgrad) override {
    const int c = cfg_.hidden;
    if (part == 0) moe_combine_backward<D, T>(w_, x, dout, dx, g_, c, cache_, wgrad);
    if (part == 1 && !sharded_) moe_experts_backward<D, T>(w_, g_, c, cache_, wgrad);
    if (part == 1 && sharded_) {
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
  bool sharded_ = false;
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
// per-microbatch buffers: the device model holds one per layer, the device executor one per layer
// and microbatch in flight.
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

template <class D, class T>
class DevModel {
 public:
  explicit DevModel(HybridModel<T>& host) : host_(host), params_(host.parameters()) {
    const auto& pattern = host.pattern();
    const auto& cfg = host.config();
    const auto keys = patterns::layer_keys(pattern);
    std::size_t phys = 0;
    for (const auto& item : pattern.items()) {
      layer_begin_.push_back(blocks_.size());
      for (const char sym : item.symbols) {
        const std::string pre = "layers." + std::to_string(keys.at(phys++).physical) + ".";
        blocks_.push_back(make_block(sym, pre, T(1)));
      }
    }
    layer_begin_.push_back(blocks_.size());
    const auto prefixes = patterns::mtp_layer_prefixes(pattern);
    for (int d = 0; d < pattern.mtp_depths; ++d) {
      Depth depth;
      depth.prefix = prefixes.at(static_cast<std::size_t>(d));
      const auto inner = patterns::mtp_inner_prefixes(pattern, d);
      const T scale = T(1) / static_cast<T>(pattern.mtp_depths);
      for (std::size_t j = 0; j < pattern.mtp_items.size(); ++j)
        depth.blocks.push_back(make_block(pattern.mtp_items[j].symbols.at(0), inner[j], scale));
      mtp_.push_back(std::move(depth));
    }
    (void)cfg;
  }

  LossBreakdown forward(const Batch& batch) {
    const ModelConfig& cfg = host_.config();
    if (batch.tokens.rank() != 2 || batch.tokens.shape != batch.targets.shape)
      throw EngineError(ErrorCode::BadInput, "batch tokens and targets must both be (B, T)");
    b_ = batch.tokens.dim(0);
    t_ = batch.tokens.dim(1);
    if (b_ < 1 || t_ < 1) throw EngineError(ErrorCode::BadInput, "batch must hold at least one token");
    try {
      check_tokens(batch.tokens.data, cfg.vocab_size);
      check_tokens(batch.targets.data, cfg.vocab_size);
    } catch (const std::out_of_range& e) {
      throw EngineError(ErrorCode::BadInput, e.what());
    }
    const int n = b_ * t_, c = cfg.hidden, v = cfg.vocab_size;
    const T eps = static_cast<T>(cfg.norm_eps);
    const std::size_t nc = static_cast<std::size_t>(n) * c;
    LossBreakdown loss;
    tokens_ = upload<D>(batch.tokens.ptr(), batch.tokens.size());
    targets_ = upload<D>(batch.targets.ptr(), batch.targets.size());
    if (tracing_ && !mtp_.empty())
      throw EngineError(ErrorCode::Unsupported, "tracing MTP depths on the device is not supported yet");
    marks_.clear();
    Buf<D, T> h(nc);
    Event t0 = D::record();
    embedding_forward<D, T>(h.get(), tokens_.get(), params_.w(kWte), n, c);
    span("pre_process", 'F', -1, t0);
    // Logical layer by logical layer, in the schedule's slots: pre_dispatch (the members before an
    // MLP/MoE terminal, then the MoE's norm, router and permutation), mlp, combine.
    for (std::size_t l = 0; l + 1 < layer_begin_.size(); ++l) {
      const std::size_t lo = layer_begin_[l], hi = layer_begin_[l + 1];
      const int layer = static_cast<int>(l);
      const char last = blocks_[hi - 1].symbol;
      const std::size_t pre_end = last == '-' || last == 'E' ? hi - 1 : hi;
      t0 = D::record();
      for (std::size_t i = lo; i < pre_end; ++i) blocks_[i].forward(h, eps, b_, t_, c);
      if (last == 'E') {
        Block& e = blocks_[hi - 1];
        e.forward_part(0, h, eps, b_, t_, c);
        span("pre_dispatch", 'F', layer, t0);
        t0 = D::record();
        e.forward_part(1, h, eps, b_, t_, c);
        span("mlp", 'F', layer, t0);
        t0 = D::record();
        e.forward_part(2, h, eps, b_, t_, c);
        span("combine", 'F', layer, t0);
      } else if (last == '-') {
        if (pre_end > lo) span("pre_dispatch", 'F', layer, t0);
        t0 = D::record();
        blocks_[hi - 1].forward(h, eps, b_, t_, c);
        span("mlp", 'F', layer, t0);
      } else {
        span("pre_dispatch", 'F', layer, t0);
      }
      for (std::size_t i = lo; i < hi; ++i) {
        loss.aux += static_cast<double>(blocks_[i].branch->aux_loss());
        loss.z += static_cast<double>(blocks_[i].branch->z_loss());
      }
    }
    h_pre_final_ = std::move(h);
    t0 = D::record();
    h_final_.resize(nc);
    fn_rstd_.resize(static_cast<std::size_t>(n));
    rmsnorm_forward<D, T>(h_final_.get(), fn_rstd_.get(), h_pre_final_.get(), params_.w(kFinalNorm), n, c, eps);
    logits_.resize(static_cast<std::size_t>(n) * v);
    output_forward<D, T>(logits_.get(), h_final_.get(), params_.w(kOut), n, c, v);
    const T lm_weight = T(1) / static_cast<T>(n);  // HybridModel's weight
    const std::vector<T> lm_w(static_cast<std::size_t>(n), lm_weight);
    lm_weights_ = upload<D>(lm_w.data(), lm_w.size());
    lse_.resize(static_cast<std::size_t>(n));
    loss.lm = static_cast<double>(
        cross_entropy_forward<D, T>(lse_.get(), logits_.get(), targets_.get(), lm_weights_.get(), n, v));
    span("post_process", 'F', -1, t0);

    const Buf<D, T>* prev = &h_final_;
    Tensor<int> ids = batch.tokens, tgt = batch.targets;
    const int depths = static_cast<int>(mtp_.size());
    for (int d = 0; d < depths; ++d) {
      Depth& md = mtp_[static_cast<std::size_t>(d)];
      ids = roll_left(ids);
      tgt = roll_left(tgt);
      md.ids = upload<D>(ids.ptr(), ids.size());
      md.targets = upload<D>(tgt.ptr(), tgt.size());
      const int valid_t = t_ - (d + 1) > 0 ? t_ - (d + 1) : 0;
      std::vector<T> wts(static_cast<std::size_t>(n), T(0));
      if (valid_t > 0) {
        const T w = static_cast<T>(cfg.mtp_loss_scaling) / static_cast<T>(depths) /
                    static_cast<T>(static_cast<long>(b_) * valid_t);
        for (int i = 0; i < b_; ++i)
          for (int j = 0; j < valid_t; ++j) wts[static_cast<std::size_t>(i * t_ + j)] = w;
      }
      md.weights = upload<D>(wts.data(), wts.size());
      md.emb.resize(nc);
      md.en.resize(nc);
      md.hn.resize(nc);
      md.en_rstd.resize(static_cast<std::size_t>(n));
      md.hn_rstd.resize(static_cast<std::size_t>(n));
      embedding_forward<D, T>(md.emb.get(), md.ids.get(), params_.w(kWte), n, c);
      rmsnorm_forward<D, T>(md.en.get(), md.en_rstd.get(), md.emb.get(), params_.w(md.prefix + "enorm.weight"), n, c, eps);
      md.hin.resize(nc);
      D::copy(md.hin.get(), prev->get(), nc);
      rmsnorm_forward<D, T>(md.hn.get(), md.hn_rstd.get(), md.hin.get(), params_.w(md.prefix + "hnorm.weight"), n, c, eps);
      // eh_proj(cat(enorm(emb), hnorm(h))): the embedding half first, as Megatron concatenates.
      md.cat.resize(2 * nc);
      concat_rows<D, T>(md.cat.get(), md.en.get(), md.hn.get(), n, c);
      Buf<D, T> x(nc);
      D::gemm(x.get(), md.cat.get(), params_.w(md.prefix + "eh_proj.weight"), n, c, 2 * c, false, true, false);
      for (auto& blk : md.blocks) {
        blk.forward(x, eps, b_, t_, c);
        loss.aux += static_cast<double>(blk.branch->aux_loss());
        loss.z += static_cast<double>(blk.branch->z_loss());
      }
      md.pre = std::move(x);
      md.hout.resize(nc);
      md.fn_rstd.resize(static_cast<std::size_t>(n));
      rmsnorm_forward<D, T>(md.hout.get(), md.fn_rstd.get(), md.pre.get(), params_.w(md.prefix + "final_layernorm.weight"),
                            n, c, eps);
      md.logits.resize(static_cast<std::size_t>(n) * v);
      output_forward<D, T>(md.logits.get(), md.hout.get(), params_.w(kOut), n, c, v);
      md.lse.resize(static_cast<std::size_t>(n));
      loss.mtp.push_back(static_cast<double>(
          cross_entropy_forward<D, T>(md.lse.get(), md.logits.get(), md.targets.get(), md.weights.get(), n, v)));
      prev = &md.hout;
    }
    loss.total = loss.lm + loss.aux + loss.z;
    for (const double m : loss.mtp) loss.total += m;
    have_forward_ = true;
    return loss;
  }

  // Gradients of LossBreakdown::total accumulate into the device gradients.
  void backward() {
    if (!have_forward_) throw EngineError(ErrorCode::BadInput, "backward() called before forward()");
    const ModelConfig& cfg = host_.config();
    const int n = b_ * t_, c = cfg.hidden, v = cfg.vocab_size;
    const std::size_t nc = static_cast<std::size_t>(n) * c;
    Buf<D, T> dnext;
    for (int d = static_cast<int>(mtp_.size()) - 1; d >= 0; --d) {
      Depth& md = mtp_[static_cast<std::size_t>(d)];
      Buf<D, T> dlogits = zeros(static_cast<std::size_t>(n) * v), dhout = zeros(nc);
      cross_entropy_backward<D, T>(dlogits.get(), md.logits.get(), md.targets.get(), md.weights.get(), md.lse.get(), n,
                                   v, T(1));
      output_backward<D, T>(dhout.get(), params_.g(kOut), dlogits.get(), md.hout.get(), params_.w(kOut), n, c, v);
      if (dnext.size() > 0) add_into(dhout, dnext);
      Buf<D, T> dx = zeros(nc);
      rmsnorm_backward<D, T>(dx.get(), params_.g(md.prefix + "final_layernorm.weight"), dhout.get(), md.pre.get(),
                             params_.w(md.prefix + "final_layernorm.weight"), md.fn_rstd.get(), n, c);
      for (auto it = md.blocks.rbegin(); it != md.blocks.rend(); ++it) it->backward(dx, b_, t_, c);
      Buf<D, T> dcat = zeros(2 * nc);
      D::gemm(dcat.get(), dx.get(), params_.w(md.prefix + "eh_proj.weight"), n, 2 * c, c, false, false, true);
      D::gemm(params_.g(md.prefix + "eh_proj.weight"), dx.get(), md.cat.get(), c, 2 * c, n, true, false, true);
      Buf<D, T> den(nc), dhn(nc);
      split_rows<D, T>(den.get(), dhn.get(), dcat.get(), n, c);
      Buf<D, T> demb = zeros(nc);
      rmsnorm_backward<D, T>(demb.get(), params_.g(md.prefix + "enorm.weight"), den.get(), md.emb.get(),
                             params_.w(md.prefix + "enorm.weight"), md.en_rstd.get(), n, c);
      embedding_backward<D, T>(params_.g(kWte), demb.get(), md.ids.get(), n, c);
      dnext = zeros(nc);
      rmsnorm_backward<D, T>(dnext.get(), params_.g(md.prefix + "hnorm.weight"), dhn.get(), md.hin.get(),
                             params_.w(md.prefix + "hnorm.weight"), md.hn_rstd.get(), n, c);
    }
    Event t0 = D::record();
    Buf<D, T> dlogits = zeros(static_cast<std::size_t>(n) * v), dhf = zeros(nc);
    cross_entropy_backward<D, T>(dlogits.get(), logits_.get(), targets_.get(), lm_weights_.get(), lse_.get(), n, v, T(1));
    output_backward<D, T>(dhf.get(), params_.g(kOut), dlogits.get(), h_final_.get(), params_.w(kOut), n, c, v);
    if (dnext.size() > 0) add_into(dhf, dnext);
    Buf<D, T> dh = zeros(nc);
    rmsnorm_backward<D, T>(dh.get(), params_.g(kFinalNorm), dhf.get(), h_pre_final_.get(), params_.w(kFinalNorm),
                           fn_rstd_.get(), n, c);
    span("post_process", 'B', -1, t0);
    for (std::size_t l = layer_begin_.size() - 1; l-- > 0;) {
      const std::size_t lo = layer_begin_[l], hi = layer_begin_[l + 1];
      const int layer = static_cast<int>(l);
      const char last = blocks_[hi - 1].symbol;
      const std::size_t pre_end = last == '-' || last == 'E' ? hi - 1 : hi;
      t0 = D::record();
      if (last == 'E') {
        Block& e = blocks_[hi - 1];
        e.backward_part(0, dh, b_, t_, c);
        span("combine", 'B', layer, t0);
        t0 = D::record();
        e.backward_part(1, dh, b_, t_, c);
        span("mlp", 'B', layer, t0);
        t0 = D::record();
        e.backward_part(2, dh, b_, t_, c);
      } else if (last == '-') {
        blocks_[hi - 1].backward(dh, b_, t_, c);
        span("mlp", 'B', layer, t0);
        t0 = D::record();
      }
      for (std::size_t i = pre_end; i-- > lo;) blocks_[i].backward(dh, b_, t_, c);
      if (last == 'E' || pre_end > lo) span("pre_dispatch", 'B', layer, t0);
    }
    t0 = D::record();
    embedding_backward<D, T>(params_.g(kWte), dh.get(), tokens_.get(), n, c);
    span("pre_process", 'B', -1, t0);
  }

  // Timing of the slot pieces (pre_process, pre_dispatch, mlp, combine, post_process; forward and
  // backward) of the next forward and backward, with the device's own clock (CUDA events on the
  // GPU): what `train --backend cuda --trace` maps onto the nodes of a plan. MTP depths are not
  // traced yet (forward throws).
  void set_tracing(bool on) { tracing_ = on; }
  DevParams<D, T>& params() { return params_; }
  struct TracedSpan {
    std::string slot;
    char phase = 'F';
    int layer = -1;  // logical layer; -1 for pre/post-process
    double start_s = 0, duration_s = 0;
  };
  std::vector<TracedSpan> take_trace() {
    std::vector<TracedSpan> out;
    if (marks_.empty()) return out;
    D::synchronize();
    const Event origin = marks_.front().begin;
    for (const auto& m : marks_)
      out.push_back({m.slot, m.phase, m.layer, D::seconds(origin, m.begin), D::seconds(m.begin, m.end)});
    for (auto& m : marks_) {
      D::release_event(m.begin);
      D::release_event(m.end);
    }
    marks_.clear();
    return out;
  }

  void zero_grad() { params_.zero_grad(); }
  void download_grads() { params_.download_grads(); }
  void upload_params() { params_.upload_params(); }
  void download_params() { params_.download_params(); }
  double adamw_step(const AdamWConfig& cfg, AdamWState<T>& state) { return params_.adamw_step(cfg, state); }
  void download_optimizer_state(AdamWState<T>& state) const { params_.download_optimizer_state(state); }
  void upload_optimizer_state(const AdamWState<T>& state) { params_.upload_optimizer_state(state); }
  std::vector<T> logits() const {
    std::vector<T> out(logits_.size());
    D::download(out.data(), logits_.get(), out.size());
    return out;
  }

 private:
  static constexpr const char* kWte = "embedding.word_embeddings.weight";
  static constexpr const char* kFinalNorm = "decoder.final_norm.weight";
  static constexpr const char* kOut = "output_layer.weight";

  using Block = DevBlock<D, T>;
  struct Depth {
    std::string prefix;
    std::vector<Block> blocks;
    Buf<D, int> ids, targets;
    Buf<D, T> weights, emb, en, hn, hin, cat, pre, hout, logits, lse, en_rstd, hn_rstd, fn_rstd;
  };

  Block make_block(char sym, const std::string& pre, T loss_scale) {
    return make_dev_block<D, T>(sym, host_.config(), params_, pre, loss_scale);
  }
  static Buf<D, T> zeros(std::size_t n) {
    Buf<D, T> b;
    b.assign_zero(n);
    return b;
  }
  static void add_into(Buf<D, T>& dst, const Buf<D, T>& src) {
    add_inplace<D, T>(dst.get(), src.get(), static_cast<long>(dst.size()));
  }

  using Event = typename D::Event;
  struct Mark {
    std::string slot;
    char phase;
    int layer;
    Event begin, end;
  };
  void span(const char* slot, char phase, int layer, Event begin) {
    if (tracing_)
      marks_.push_back({slot, phase, layer, begin, D::record()});
    else
      D::release_event(begin);
  }

  HybridModel<T>& host_;
  DevParams<D, T> params_;
  std::vector<Block> blocks_;
  std::vector<std::size_t> layer_begin_;  // first block of each logical layer, then blocks_.size()
  bool tracing_ = false;
  std::vector<Mark> marks_;
  std::vector<Depth> mtp_;
  int b_ = 0, t_ = 0;
  bool have_forward_ = false;
  Buf<D, int> tokens_, targets_;
  Buf<D, T> h_pre_final_, h_final_, fn_rstd_, logits_, lm_weights_, lse_;
};

}  // namespace ht::engine::dev

#include <algorithm>
#include <chrono>

#include "ht/engine/cuda/device_model.hpp"

namespace ht::engine::dev {

// measure_gemm_tflops_* (device_model.hpp) for a policy D.
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

// DevModel<D, float> behind the plain DeviceModel interface (device_model.hpp).
template <class D>
class DeviceModelOn final : public cuda::DeviceModel {
 public:
  DeviceModelOn(HybridModel<float>& host, std::string name) : m_(host), name_(std::move(name)) {}
  std::string device() const override { return name_; }
  LossBreakdown forward(const Batch& batch) override { return m_.forward(batch); }
  void backward() override { m_.backward(); }
  void zero_grad() override { m_.zero_grad(); }
  void download_grads() override { m_.download_grads(); }
  void upload_params() override { m_.upload_params(); }
  void download_params() override { m_.download_params(); }
  double adamw_step(const AdamWConfig& cfg, AdamWState<float>& state) override { return m_.adamw_step(cfg, state); }
  void download_optimizer_state(AdamWState<float>& state) const override { m_.download_optimizer_state(state); }
  void upload_optimizer_state(const AdamWState<float>& state) override { m_.upload_optimizer_state(state); }
  void synchronize() override { D::synchronize(); }
  void set_tracing(bool on) override { m_.set_tracing(on); }
  std::vector<Span> take_trace() override {
    std::vector<Span> out;
    for (const auto& s : m_.take_trace()) out.push_back({s.slot, s.phase, s.layer, s.start_s, s.duration_s});
    return out;
  }
  double gemm_flops() const override { return D::gemm_flops_total(); }

 private:
  DevModel<D, float> m_;
  std::string name_;
};

}  // namespace ht::engine::dev
