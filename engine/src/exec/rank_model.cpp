// A rank's model: every parameter drawn from (seed, its canonical name), so a rank that builds
// only its stage's layers holds the same values as HybridModel; and the per-microbatch state of
// its layers and MTP depths.
#include "ht/engine/error.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "state.hpp"

namespace ht::engine::exec {

// Every parameter is initialised from (seed, its canonical name), so a rank that builds only
// its stage's layers holds the same values as the single-stage model.
RankModel Executor::Impl::build_rank(std::uint64_t seed, const RankLayout& lo) const {
  RankModel m;
  const float std = cfg.init_std;
  m.first = lo.first;
  m.last = lo.last;
  if (m.first) {
    m.wte = Tf({cfg.vocab_size, cfg.hidden});
    Rng rng(seed, "embedding");
    for (auto& v : m.wte.data) v = static_cast<float>(rng.normal()) * std;
    m.wte_g = Tf(m.wte.shape);
  }
  if (m.last) {
    m.out_w = Tf({cfg.vocab_size, cfg.hidden});
    Rng rng(seed, "output_layer");
    for (auto& v : m.out_w.data) v = static_cast<float>(rng.normal()) * std;
    m.out_w_g = Tf(m.out_w.shape);
    m.final_norm = ones(cfg.hidden);
    m.final_norm_g = Tf({cfg.hidden});
    m.final_norm_key = patterns::final_norm_prefix(pattern) + "weight";
  }
  const auto keys = patterns::layer_keys(pattern);
  std::size_t phys = 0, logical = 0;
  for (const auto& item : pattern.items()) {
    LogicalLayer layer;
    layer.held = lo.holds.at(logical++) != 0;
    if (!layer.held) {
      phys += item.symbols.size();
      m.layers.push_back(std::move(layer));
      continue;
    }
    for (std::size_t i = 0; i < item.symbols.size(); ++i, ++phys)
      add_block(layer, item.symbols[i], static_cast<int>(phys), lo.ep_rank, keys.at(phys).key_prefix,
                "layers." + std::to_string(phys) + ".", seed);
    check_terminal(layer, "logical layer '" + item.symbols + "'");
    m.layers.push_back(std::move(layer));
  }
  // MTP depths live with the loss on the last stage; their parameters are named and drawn as
  // HybridModel's (keys are the canonical names there too).
  if (m.last) {
    const auto prefixes = patterns::mtp_layer_prefixes(pattern);
    for (int d = 0; d < pattern.mtp_depths; ++d) {
      MtpDepth md;
      md.prefix = prefixes.at(static_cast<std::size_t>(d));
      md.enorm = ones(cfg.hidden);
      md.hnorm = ones(cfg.hidden);
      md.final_norm = ones(cfg.hidden);
      md.eh_proj = Tf({cfg.hidden, 2 * cfg.hidden});
      Rng rng(seed, md.prefix + "eh_proj");
      for (auto& v : md.eh_proj.data) v = static_cast<float>(rng.normal()) * std;
      md.enorm_g = Tf({cfg.hidden});
      md.hnorm_g = Tf({cfg.hidden});
      md.final_norm_g = Tf({cfg.hidden});
      md.eh_proj_g = Tf(md.eh_proj.shape);
      md.layer.held = true;
      md.layer.loss_scale = 1.0f / static_cast<float>(pattern.mtp_depths);
      const auto inner = patterns::mtp_inner_prefixes(pattern, d);
      for (std::size_t j = 0; j < pattern.mtp_items.size(); ++j)
        add_block(md.layer, pattern.mtp_items[j].symbols.at(0), -1, lo.ep_rank, inner[j], inner[j], seed);
      // The plan runs a depth as one layer plan (reference 3.4), split like a group.
      check_terminal(md.layer, "the MTP depth pattern '" + pattern.mtp + "' (one layer plan per depth)");
      m.mtp.push_back(std::move(md));
    }
  }
  return m;
}

void Executor::Impl::add_block(LogicalLayer& layer, char sym, int physical, int ep_rank, const std::string& key_prefix,
                               const std::string& canonical_prefix, std::uint64_t seed) const {
  Block b;
  b.symbol = sym;
  b.physical = physical;
  b.key_prefix = key_prefix;
  b.canonical_prefix = canonical_prefix;
  b.norm_w = ones(cfg.hidden);
  b.norm_g = Tf({cfg.hidden});
  Rng rng(seed, b.canonical_prefix);
  try {
    if (sym == 'E') {
      b.moe = std::make_unique<MoeLayer>();
      moe_init(b.moe->p, cfg, rng);  // every expert drawn, so the stream stays HybridModel's
      // The rank keeps the experts it owns (EP); the others' tensors stay empty.
      for (int e = 0; e < cfg.num_experts; ++e)
        if (e / local_experts != ep_rank) b.moe->p.experts[static_cast<std::size_t>(e)] = {};
      b.moe->g = detail::zeros_like(b.moe->p);
    } else {
      b.member = detail::make_member(sym, cfg, rng);
    }
  } catch (const std::invalid_argument& e) {
    throw EngineError(ErrorCode::BadConfig, e.what());
  }
  if ((sym == '-' || sym == 'E') && layer.terminal < 0) layer.terminal = static_cast<int>(layer.blocks.size());
  layer.blocks.push_back(std::move(b));
}

void Executor::Impl::check_terminal(const LogicalLayer& layer, const std::string& what) {
  if (layer.terminal >= 0 && layer.terminal + 1 != static_cast<int>(layer.blocks.size()))
    fail(what + " has its MLP/MoE before the last member (rule O1)");
}

LayerState Executor::Impl::new_layer_state(LogicalLayer& layer) const {
  LayerState ls;
  for (auto& b : layer.blocks) {
    BlockState bs;
    bs.norm_g_staged = Tf({cfg.hidden});
    if (b.member) bs.ms = b.member->new_state();
    ls.blocks.push_back(std::move(bs));
  }
  if (layer.moe()) {
    ls.moe = std::make_unique<MoeState>();
    ls.moe->staged = detail::zeros_like(layer.blocks.back().moe->p);
  }
  return ls;
}

MtpState Executor::Impl::new_mtp_state(MtpDepth& md) const {
  MtpState ms;
  ms.inner = new_layer_state(md.layer);
  ms.eh_proj_staged = Tf(md.eh_proj.shape);
  ms.enorm_staged = Tf({cfg.hidden});
  ms.hnorm_staged = Tf({cfg.hidden});
  return ms;
}

}  // namespace ht::engine::exec
