// HybridModel: builds the residual blocks from a parsed pattern and runs forward / backward over
// them in the order reference section 5.1 gives (pre-norm residual blocks, final norm, output
// layer, MTP depths). The loops over logical layers and their members are the only place the
// grouping is visible; the arithmetic per physical layer is the same either way.
#include "ht/engine/model.hpp"

#include <algorithm>
#include <stdexcept>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/table.hpp"
#include "ht/engine/runtime/host_allocator.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/symbols.hpp"

namespace ht::engine {
namespace {

template <class T>
Tensor<T> ones(int n) {
  Tensor<T> t({n});
  std::fill(t.data.begin(), t.data.end(), T(1));
  return t;
}

// One physical layer: h_out = h + branch(rmsnorm(h)).
template <class T>
struct Block {
  char symbol = 0;
  std::string key_prefix;        // "decoder.layers.<logical>." or "mtp.layers.<d>.mtp_model_layer.layers.<j>."
  std::string canonical_prefix;  // "layers.<physical>." or the MTP key prefix
  Tensor<T> norm_w, norm_g;
  std::unique_ptr<Branch<T>> branch;
  // cache of the last forward
  Tensor<T> h_in, normed, out;
  RMSNormCache<T> ncache;

  void forward(Tensor<T>& h, T eps) {
    h_in = h;
    rmsnorm_forward(normed, ncache, h_in, norm_w, eps);
    branch->forward(normed, out);
    for (std::size_t i = 0; i < h.size(); ++i) h[i] += out[i];
  }
  // dh holds d(h_out) on entry and d(h_in) on return (the residual passes dh through).
  void backward(Tensor<T>& dh) {
    Tensor<T> dnormed(normed.shape);
    branch->backward(normed, dh, dnormed);
    rmsnorm_backward(dh, norm_g, dnormed, h_in, norm_w, ncache);
  }
};

template <class T>
Block<T> make_block(char symbol, const ModelConfig& cfg, std::uint64_t seed,
                    std::string key_prefix, std::string canonical_prefix, T loss_scale) {
  Block<T> b;
  b.symbol = symbol;
  b.key_prefix = std::move(key_prefix);
  b.canonical_prefix = std::move(canonical_prefix);
  b.norm_w = ones<T>(cfg.hidden);
  b.norm_g = Tensor<T>({cfg.hidden});
  Rng rng(seed, b.canonical_prefix);
  try {
    b.branch = make_branch<T>(symbol, cfg, rng, loss_scale);
  } catch (const std::invalid_argument& e) {  // layer dimension checks
    throw EngineError(ErrorCode::BadConfig, e.what());
  }
  return b;
}

template <class T>
struct LogicalLayer {
  patterns::Item item;
  std::vector<Block<T>> members;
};

template <class T>
struct MtpDepth {
  Tensor<T> enorm, enorm_g, hnorm, hnorm_g, eh_proj, eh_proj_g, final_norm, final_norm_g;
  std::vector<Block<T>> layers;
  std::string prefix;
  // cache
  Tensor<int> ids, targets;
  Tensor<T> weights, emb, en, hin, hn, cat, pre, hout, logits;
  RMSNormCache<T> enc, hnc, fnc;
  CrossEntropyCache<T> ce;
};

}  // namespace

template <class T>
struct HybridModel<T>::Impl {
  patterns::ParsedPattern pattern;
  ModelConfig cfg;
  Tensor<T> wte, wte_g, final_norm, final_norm_g, out_w, out_w_g;
  std::vector<LogicalLayer<T>> layers;
  std::vector<MtpDepth<T>> mtp;
  // cache of the last forward
  Batch batch;
  bool have_forward = false;
  Tensor<T> emb, h_pre_final, h_final, logits, lm_weights;
  RMSNormCache<T> fnc;
  CrossEntropyCache<T> ce;
};

std::string unsupported_symbols(const patterns::ParsedPattern& pattern) {
  std::string all = pattern.flattened_symbols();
  for (int d = 0; d < pattern.mtp_depths; ++d) all += pattern.mtp;
  for (char c : all) {
    const auto* info = patterns::find_symbol(c);
    if (c == 'D' || c == 'C' || c == 'H' || (info && !info->engine_supported))
      return std::string("layer symbol '") + c + "' (" + (info ? std::string(info->name) : "?") +
             ") is not implemented in the engine (supported: M G * W + - E)";
  }
  return "";
}

Tensor<int> roll_left(const Tensor<int>& x) {
  Tensor<int> y(x.shape);
  const int b = x.dim(0), t = x.dim(1);
  for (int i = 0; i < b; ++i)
    for (int j = 0; j + 1 < t; ++j) y[static_cast<std::size_t>(i * t + j)] = x[static_cast<std::size_t>(i * t + j + 1)];
  return y;
}

template <class T>
HybridModel<T>::HybridModel(const patterns::ParsedPattern& pattern, const ModelConfig& cfg,
                            std::uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  runtime::keep_freed_host_memory();
  if (auto msg = unsupported_symbols(pattern); !msg.empty())
    throw EngineError(ErrorCode::Unsupported, msg);
  if (cfg.hidden < 1 || cfg.vocab_size < 1)
    throw EngineError(ErrorCode::BadConfig, "hidden size and vocabulary size must be positive");
  auto& m = *impl_;
  m.pattern = pattern;
  m.cfg = cfg;
  const T std = static_cast<T>(cfg.init_std);
  m.wte = Tensor<T>({cfg.vocab_size, cfg.hidden});
  {
    Rng rng(seed, "embedding");
    for (auto& v : m.wte.data) v = static_cast<T>(rng.normal()) * std;
  }
  m.wte_g = Tensor<T>(m.wte.shape);
  m.out_w = Tensor<T>({cfg.vocab_size, cfg.hidden});
  {
    Rng rng(seed, "output_layer");
    for (auto& v : m.out_w.data) v = static_cast<T>(rng.normal()) * std;
  }
  m.out_w_g = Tensor<T>(m.out_w.shape);
  m.final_norm = ones<T>(cfg.hidden);
  m.final_norm_g = Tensor<T>({cfg.hidden});

  const auto keys = patterns::layer_keys(pattern);
  std::size_t phys = 0;
  for (const auto& item : pattern.items()) {
    LogicalLayer<T> layer;
    layer.item = item;
    for (char sym : item.symbols) {
      const auto& k = keys.at(phys);
      layer.members.push_back(make_block<T>(sym, cfg, seed, k.key_prefix,
                                            "layers." + std::to_string(k.physical) + ".", T(1)));
      ++phys;
    }
    m.layers.push_back(std::move(layer));
  }

  const auto mtp_prefixes = patterns::mtp_layer_prefixes(pattern);
  for (int d = 0; d < pattern.mtp_depths; ++d) {
    MtpDepth<T> depth;
    depth.prefix = mtp_prefixes.at(static_cast<std::size_t>(d));
    depth.enorm = ones<T>(cfg.hidden);
    depth.hnorm = ones<T>(cfg.hidden);
    depth.final_norm = ones<T>(cfg.hidden);
    depth.eh_proj = Tensor<T>({cfg.hidden, 2 * cfg.hidden});
    Rng rng(seed, depth.prefix + "eh_proj");
    for (auto& v : depth.eh_proj.data) v = static_cast<T>(rng.normal()) * std;
    depth.enorm_g = Tensor<T>({cfg.hidden});
    depth.hnorm_g = Tensor<T>({cfg.hidden});
    depth.final_norm_g = Tensor<T>({cfg.hidden});
    depth.eh_proj_g = Tensor<T>(depth.eh_proj.shape);
    const auto inner = patterns::mtp_inner_prefixes(pattern, d);
    // Router losses inside repeated MTP are divided by the number of depths (reference 5.1).
    const T scale = T(1) / static_cast<T>(pattern.mtp_depths);
    for (std::size_t j = 0; j < pattern.mtp_items.size(); ++j)
      depth.layers.push_back(make_block<T>(pattern.mtp_items[j].symbols.at(0), cfg, seed, inner[j],
                                           inner[j], scale));
    m.mtp.push_back(std::move(depth));
  }
}

template <class T>
HybridModel<T>::~HybridModel() = default;
template <class T>
HybridModel<T>::HybridModel(HybridModel&&) noexcept = default;
template <class T>
HybridModel<T>& HybridModel<T>::operator=(HybridModel&&) noexcept = default;

template <class T>
LossBreakdown HybridModel<T>::forward(const Batch& batch) {
  auto& m = *impl_;
  const auto& cfg = m.cfg;
  if (batch.tokens.rank() != 2 || batch.tokens.shape != batch.targets.shape)
    throw EngineError(ErrorCode::BadInput, "batch tokens and targets must both be (B, T)");
  const int b = batch.tokens.dim(0), t = batch.tokens.dim(1);
  if (b < 1 || t < 1) throw EngineError(ErrorCode::BadInput, "batch must hold at least one token");
  for (int id : batch.targets.data)
    if (id < 0 || id >= cfg.vocab_size)
      throw EngineError(ErrorCode::BadInput, "target id " + std::to_string(id) +
                                                 " outside the vocabulary [0, " +
                                                 std::to_string(cfg.vocab_size) + ")");
  m.batch = batch;
  const T eps = static_cast<T>(cfg.norm_eps);
  LossBreakdown loss;
  try {
    embedding_forward(m.emb, batch.tokens, m.wte);
  } catch (const std::out_of_range& e) {
    throw EngineError(ErrorCode::BadInput, e.what());
  }

  Tensor<T> h = m.emb;
  for (auto& layer : m.layers)
    for (auto& block : layer.members) {
      block.forward(h, eps);
      loss.aux += static_cast<double>(block.branch->aux_loss());
      loss.z += static_cast<double>(block.branch->z_loss());
    }
  m.h_pre_final = std::move(h);
  rmsnorm_forward(m.h_final, m.fnc, m.h_pre_final, m.final_norm, eps);
  output_forward(m.logits, m.h_final, m.out_w);
  const int n = b * t;
  m.lm_weights = Tensor<T>({b, t});
  std::fill(m.lm_weights.data.begin(), m.lm_weights.data.end(), T(1) / static_cast<T>(n));
  loss.lm = static_cast<double>(cross_entropy_forward(m.ce, m.logits, batch.targets, m.lm_weights));

  // MTP depth d sees tokens rolled d steps left and predicts the token d+1 ahead of position t.
  const Tensor<T>* prev = &m.h_final;
  Tensor<int> ids = batch.tokens, tgt = batch.targets;
  const int depths = static_cast<int>(m.mtp.size());
  for (int d = 0; d < depths; ++d) {
    auto& md = m.mtp[static_cast<std::size_t>(d)];
    ids = roll_left(ids);
    tgt = roll_left(tgt);
    md.ids = ids;
    md.targets = tgt;
    const int valid_t = std::max(0, t - (d + 1));
    md.weights = Tensor<T>({b, t});
    if (valid_t > 0) {
      const T w = static_cast<T>(cfg.mtp_loss_scaling) / static_cast<T>(depths) /
                  static_cast<T>(b * valid_t);
      for (int i = 0; i < b; ++i)
        for (int j = 0; j < valid_t; ++j) md.weights[static_cast<std::size_t>(i * t + j)] = w;
    }
    embedding_forward(md.emb, md.ids, m.wte);
    rmsnorm_forward(md.en, md.enc, md.emb, md.enorm, eps);
    md.hin = *prev;
    rmsnorm_forward(md.hn, md.hnc, md.hin, md.hnorm, eps);
    // eh_proj(cat(enorm(emb), hnorm(h))): embedding half first, as Megatron concatenates.
    const int c = cfg.hidden;
    md.cat = Tensor<T>({b, t, 2 * c});
    for (int r = 0; r < n; ++r) {
      std::copy_n(md.en.ptr() + static_cast<long>(r) * c, c, md.cat.ptr() + static_cast<long>(r) * 2 * c);
      std::copy_n(md.hn.ptr() + static_cast<long>(r) * c, c, md.cat.ptr() + static_cast<long>(r) * 2 * c + c);
    }
    Tensor<T> x({b, t, c});
    cpu::linear_forward<T>(x.ptr(), md.cat.ptr(), md.eh_proj.ptr(), nullptr, n, 2 * c, c);
    for (auto& block : md.layers) {
      block.forward(x, eps);
      loss.aux += static_cast<double>(block.branch->aux_loss());
      loss.z += static_cast<double>(block.branch->z_loss());
    }
    md.pre = std::move(x);
    rmsnorm_forward(md.hout, md.fnc, md.pre, md.final_norm, eps);
    output_forward(md.logits, md.hout, m.out_w);
    loss.mtp.push_back(static_cast<double>(cross_entropy_forward(md.ce, md.logits, md.targets, md.weights)));
    prev = &md.hout;
  }
  loss.total = loss.lm + loss.aux + loss.z;
  for (double v : loss.mtp) loss.total += v;
  m.have_forward = true;
  return loss;
}

template <class T>
void HybridModel<T>::backward() {
  auto& m = *impl_;
  if (!m.have_forward) throw EngineError(ErrorCode::BadInput, "backward() called before forward()");
  const int c = m.cfg.hidden;
  const int b = m.batch.tokens.dim(0), t = m.batch.tokens.dim(1), n = b * t;
  // Gradient flowing into the hidden state that depth d+1 read (for the last depth: none).
  Tensor<T> dnext;
  for (int d = static_cast<int>(m.mtp.size()) - 1; d >= 0; --d) {
    auto& md = m.mtp[static_cast<std::size_t>(d)];
    Tensor<T> dlogits(md.logits.shape);
    cross_entropy_backward(dlogits, md.logits, md.targets, md.weights, md.ce, T(1));
    Tensor<T> dhout(md.hout.shape);
    output_backward(dhout, m.out_w_g, dlogits, md.hout, m.out_w);
    if (!dnext.data.empty())
      for (std::size_t i = 0; i < dhout.size(); ++i) dhout[i] += dnext[i];
    Tensor<T> dx(md.pre.shape);
    rmsnorm_backward(dx, md.final_norm_g, dhout, md.pre, md.final_norm, md.fnc);
    for (auto it = md.layers.rbegin(); it != md.layers.rend(); ++it) it->backward(dx);
    Tensor<T> dcat(md.cat.shape);
    cpu::linear_backward<T>(dcat.ptr(), md.eh_proj_g.ptr(), nullptr, dx.ptr(), md.cat.ptr(),
                            md.eh_proj.ptr(), n, 2 * c, c);
    Tensor<T> den(md.en.shape), dhn(md.hn.shape);
    for (int r = 0; r < n; ++r) {
      std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c, c, den.ptr() + static_cast<long>(r) * c);
      std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c + c, c, dhn.ptr() + static_cast<long>(r) * c);
    }
    Tensor<T> demb(md.emb.shape);
    rmsnorm_backward(demb, md.enorm_g, den, md.emb, md.enorm, md.enc);
    embedding_backward(m.wte_g, demb, md.ids);
    dnext = Tensor<T>(md.hin.shape);
    rmsnorm_backward(dnext, md.hnorm_g, dhn, md.hin, md.hnorm, md.hnc);
  }
  Tensor<T> dlogits(m.logits.shape);
  cross_entropy_backward(dlogits, m.logits, m.batch.targets, m.lm_weights, m.ce, T(1));
  Tensor<T> dhf(m.h_final.shape);
  output_backward(dhf, m.out_w_g, dlogits, m.h_final, m.out_w);
  if (!dnext.data.empty())
    for (std::size_t i = 0; i < dhf.size(); ++i) dhf[i] += dnext[i];
  Tensor<T> dh(m.h_pre_final.shape);
  rmsnorm_backward(dh, m.final_norm_g, dhf, m.h_pre_final, m.final_norm, m.fnc);
  for (auto lit = m.layers.rbegin(); lit != m.layers.rend(); ++lit)
    for (auto bit = lit->members.rbegin(); bit != lit->members.rend(); ++bit) bit->backward(dh);
  embedding_backward(m.wte_g, dh, m.batch.tokens);
}

template <class T>
std::vector<ParamRef<T>> HybridModel<T>::parameters() {
  auto& m = *impl_;
  std::vector<ParamRef<T>> out;
  out.push_back({"embedding.word_embeddings.weight", "embedding.word_embeddings.weight", &m.wte, &m.wte_g});
  auto add_block = [&](Block<T>& blk) {
    const std::string norm = layers::prenorm_name(blk.symbol);
    out.push_back({blk.key_prefix + norm, blk.canonical_prefix + norm, &blk.norm_w, &blk.norm_g});
    blk.branch->for_each_param([&](const std::string& name, Tensor<T>& v, Tensor<T>& g) {
      out.push_back({blk.key_prefix + name, blk.canonical_prefix + name, &v, &g});
    });
  };
  for (auto& layer : m.layers)
    for (auto& blk : layer.members) add_block(blk);
  out.push_back({patterns::final_norm_prefix(m.pattern) + "weight", "decoder.final_norm.weight",
                 &m.final_norm, &m.final_norm_g});
  out.push_back({"output_layer.weight", "output_layer.weight", &m.out_w, &m.out_w_g});
  for (auto& md : m.mtp) {
    out.push_back({md.prefix + "enorm.weight", md.prefix + "enorm.weight", &md.enorm, &md.enorm_g});
    out.push_back({md.prefix + "hnorm.weight", md.prefix + "hnorm.weight", &md.hnorm, &md.hnorm_g});
    out.push_back({md.prefix + "eh_proj.weight", md.prefix + "eh_proj.weight", &md.eh_proj, &md.eh_proj_g});
    for (auto& blk : md.layers) add_block(blk);
    out.push_back({md.prefix + "final_layernorm.weight", md.prefix + "final_layernorm.weight",
                   &md.final_norm, &md.final_norm_g});
  }
  return out;
}

template <class T>
std::size_t HybridModel<T>::num_parameters() {
  std::size_t n = 0;
  for (auto& p : parameters()) n += p.value->size();
  return n;
}

template <class T>
void HybridModel<T>::zero_grad() {
  for (auto& p : parameters()) p.grad->zero();
}

template <class T>
const Tensor<T>& HybridModel<T>::logits() const { return impl_->logits; }
template <class T>
const Tensor<T>& HybridModel<T>::mtp_logits(int depth) const {
  return impl_->mtp.at(static_cast<std::size_t>(depth)).logits;
}
template <class T>
const patterns::ParsedPattern& HybridModel<T>::pattern() const { return impl_->pattern; }
template <class T>
const ModelConfig& HybridModel<T>::config() const { return impl_->cfg; }

template class HybridModel<float>;
template class HybridModel<double>;

}  // namespace ht::engine
