// The executor (see executor.hpp; its parts, by concept, are listed in state.hpp): the plan's
// node actions on per-rank models and per-(layer, microbatch) slot state, and the step that runs
// them on CpuWorld streams.
// Slot contents follow reference section 3.3: pre_dispatch runs the group's pre-layers and, for
// an 'E' terminal, the pre-MLP norm, router, permutation and shared expert; dispatch and combine
// are the all-to-alls (combine also unpermutes, adds the shared output and the residual); mlp
// runs the local experts or the dense '-' block. An MTP depth (section 3.4) is one more layer
// plan: its pre_dispatch adds the embedding, enorm/hnorm and eh_proj in front of its inner
// layer's, and mtp_post applies its final norm; post_process runs every head.
//
// Pipeline stages: each rank builds only the layers its stage holds (read from the plan), the
// embedding on stage 0 and the final norm and output layer on the last stage; PipeSend/PipeRecv
// nodes move the hidden state forward and its gradient backward between model chunks. A layer's
// gradients are accumulated over the same microbatches in the same order as on one stage (both
// 1F1B orders walk each chunk's backward microbatches in ascending order), so PP = k gives the
// single-stage bits.
#include "ht/engine/exec/executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <tuple>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/engine/exec/weight_steps.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/layers/table.hpp"
#include "ht/engine/runtime/communicator.hpp"
#include "ht/engine/runtime/cpu_world.hpp"
#include "ht/engine/runtime/event_chain.hpp"
#include "ht/patterns/checkpoint.hpp"
#include "ht/schedule/check.hpp"
#include "ht/schedule/node_args.hpp"
#include "state.hpp"

namespace ht::engine::exec {

Executor::Executor(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed,
                   schedule::Plan plan, ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  if (auto msg = unsupported_symbols(pattern); !msg.empty()) throw EngineError(ErrorCode::Unsupported, msg);
  if (auto msg = schedule::beyond_engines(plan); !msg.empty())
    throw EngineError(ErrorCode::Unsupported, "executor: " + msg);
  if (pattern.mtp_depths > 0 && plan.overlap)  // the builder's O3, also for plans built without it
    fail("hybrid MTP ('/" + pattern.mtp +
         "') does not run with the EP all-to-all overlap: the overlap scheduler does "
         "not expand the MTP's nested stack (rule O3, reference section 4); use the sequential schedule");
  if (pattern.mtp_depths > 0 && plan.pp > 1)
    fail("MTP depths ('/" + pattern.mtp + "') with pp " + std::to_string(plan.pp) +
         " are not run by the executor yet (the last stage would need a copy of the embedding); use pp 1");
  if (auto msg = plan_mismatch(pattern, plan, cfg.num_experts); !msg.empty()) fail(msg);
  if (plan.pp < 1 || plan.chunks < 1 || plan.global_ranks() != plan.pp * plan.dp)
    fail("plan has " + std::to_string(plan.global_ranks()) + " ranks for pp " + std::to_string(plan.pp) + " x dp " +
         std::to_string(plan.dp));
  const bool has_moe = pattern.has_moe();
  options.link.validate();
  im.pattern = pattern;
  im.cfg = cfg;
  im.plan = std::move(plan);
  im.options = options;
  im.nranks = im.plan.global_ranks();
  im.local_experts = has_moe ? cfg.num_experts / im.plan.ep : 0;
  im.stages = read_layout(im.plan, pattern.logical_count(), pattern.mtp_depths);
  for (int r = 0; r < im.nranks; ++r) im.models.push_back(im.build_rank(seed, im.at(r)));
  im.adam.resize(static_cast<std::size_t>(im.nranks));
}

// ---- block helpers (same arithmetic as HybridModel's Block) ----
void Executor::Impl::block_forward(Block& b, BlockState& s, Tf& h) const {
  s.h_in = h;
  rmsnorm_forward(s.normed, s.nc, s.h_in, b.norm_w, cfg.norm_eps);
  b.member->forward(s.normed, s.out, *s.ms);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] += s.out[i];
}

void Executor::Impl::block_backward(Block& b, BlockState& s, Tf& dh, WgradSink<float>* w) const {
  Tf dnormed(s.normed.shape);
  b.member->backward(s.normed, dh, dnormed, *s.ms, w);
  rmsnorm_backward(dh, s.norm_g_staged, dnormed, s.h_in, b.norm_w, s.nc);
}

void Executor::Impl::flush_norm(Block& b, BlockState& s) {
  for (std::size_t i = 0; i < b.norm_g.size(); ++i) b.norm_g[i] += s.norm_g_staged[i];
}

// ---- node actions ----
void Executor::Impl::pre_process_forward(RankModel& m, ChunkState& cs) const {
  embedding_forward(cs.h, cs.batch->tokens, m.wte);
}

void Executor::Impl::pre_process_backward(RankModel& m, ChunkState& cs) const {
  embedding_backward(m.wte_g, cs.dh, cs.batch->tokens);
}

void Executor::Impl::pre_dispatch_forward(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
  for (int i = 0; i < layer.pre_count(); ++i)
    block_forward(layer.blocks[static_cast<std::size_t>(i)], ls.blocks[static_cast<std::size_t>(i)], cs.h);
  if (!layer.moe()) return;
  Block& b = layer.blocks.back();
  BlockState& bs = ls.blocks.back();
  MoeState& st = *ls.moe;
  bs.h_in = cs.h;  // parked residual
  rmsnorm_forward(bs.normed, bs.nc, bs.h_in, b.norm_w, cfg.norm_eps);
  const int n = static_cast<int>(bs.normed.size() / static_cast<std::size_t>(cfg.hidden));
  moe_route_permute<float>(cfg, b.moe->p, bs.normed.ptr(), n, layer.loss_scale, st.routing, st.permuted_in);
  if (b.moe->p.has_shared) {
    st.shared_out.assign(bs.normed.size(), 0.0f);
    swiglu_forward<float>(st.shared_out.data(), st.shared_cache, bs.normed.ptr(), n, b.moe->p.shared);
  }
}

void Executor::Impl::mlp_forward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank) const {
  if (layer.terminal < 0) return;
  Block& b = layer.blocks.back();
  if (!layer.moe()) {
    block_forward(b, ls.blocks.back(), cs.h);
    return;
  }
  MoeState& st = *ls.moe;
  const int c = cfg.hidden;
  runtime::annotate_span("rows", std::to_string(st.layout.expert_start.back()));  // expert load
  st.expert_out.assign(st.expert_in.size(), 0.0f);
  st.expert_caches.resize(static_cast<std::size_t>(local_experts));
  for (int le = 0; le < local_experts; ++le) {
    const std::size_t lo = st.layout.expert_start[static_cast<std::size_t>(le)];
    const std::size_t hi = st.layout.expert_start[static_cast<std::size_t>(le) + 1];
    swiglu_forward<float>(st.expert_out.data() + lo * static_cast<std::size_t>(c),
                          st.expert_caches[static_cast<std::size_t>(le)],
                          st.expert_in.data() + lo * static_cast<std::size_t>(c), static_cast<int>(hi - lo),
                          b.moe->p.experts[static_cast<std::size_t>(ep_rank * local_experts + le)]);
  }
}

void Executor::Impl::combine_forward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
  Block& b = layer.blocks.back();
  BlockState& bs = ls.blocks.back();
  MoeState& st = *ls.moe;
  bs.out = Tf(bs.h_in.shape);
  moe_unpermute_combine<float>(st.routing, st.permuted_out, bs.out.ptr(), cfg.hidden);
  if (b.moe->p.has_shared)
    for (std::size_t i = 0; i < bs.out.size(); ++i) bs.out[i] += st.shared_out[i];
  cs.h = bs.h_in;
  for (std::size_t i = 0; i < cs.h.size(); ++i) cs.h[i] += bs.out[i];
}

// The heads: the main one, then one per MTP depth with the shared output layer (reference
// 3.4: PostProcessNode splits the concatenated hidden states in process_mtp_loss). With MTP the
// final norm already ran in the first depth's pre_dispatch.
void Executor::Impl::post_process_forward(RankModel& m, ChunkState& cs) const {
  if (m.mtp.empty()) rmsnorm_forward(cs.h_final, cs.fnc, cs.h, m.final_norm, cfg.norm_eps);
  output_forward(cs.logits, cs.h_final, m.out_w);
  cs.lm_weights = Tf(cs.batch->targets.shape);
  std::fill(cs.lm_weights.data.begin(), cs.lm_weights.data.end(), cs.weight);
  cs.loss += static_cast<double>(cross_entropy_forward(cs.ce, cs.logits, cs.batch->targets, cs.lm_weights));
  for (auto& ms : cs.mtp) {
    output_forward(ms.logits, ms.hout, m.out_w);
    ms.loss = static_cast<double>(cross_entropy_forward(ms.ce, ms.logits, ms.targets, ms.weights));
  }
}

// The output layer's gradient sums the heads last depth first, then the main head (as
// HybridModel::backward). Each head's hidden-state gradient is its first contribution to a
// parked tensor; the depth that consumed it adds the second before the producer runs.
void Executor::Impl::post_process_backward(RankModel& m, ChunkState& cs) const {
  for (auto it = cs.mtp.rbegin(); it != cs.mtp.rend(); ++it) {
    Tf dlogits(it->logits.shape);
    cross_entropy_backward(dlogits, it->logits, it->targets, it->weights, it->ce, 1.0f);
    it->d_hout = Tf(it->hout.shape);
    output_backward(it->d_hout, m.out_w_g, dlogits, it->hout, m.out_w);
  }
  Tf dlogits(cs.logits.shape);
  cross_entropy_backward(dlogits, cs.logits, cs.batch->targets, cs.lm_weights, cs.ce, 1.0f);
  Tf dhf(cs.h_final.shape);
  output_backward(dhf, m.out_w_g, dlogits, cs.h_final, m.out_w);
  if (!m.mtp.empty()) {
    cs.d_h_final = std::move(dhf);
    return;
  }
  cs.dh = Tf(cs.h.shape);
  rmsnorm_backward(cs.dh, m.final_norm_g, dhf, cs.h, m.final_norm, cs.fnc);
}

// ---- MTP depths (reference 3.4) ----
// pre_dispatch of depth d: the first depth applies the main final norm (the chunk's decoder
// output) and parks h_final; every depth embeds its rolled tokens, projects cat(enorm(emb),
// hnorm(h)) and runs its inner layer's pre_dispatch on the result.
void Executor::Impl::mtp_pre_dispatch_forward(RankModel& m, int d, ChunkState& cs) const {
  MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
  MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
  const float eps = cfg.norm_eps;
  if (d == 0) {
    cs.h_pre_final = cs.h;
    rmsnorm_forward(cs.h_final, cs.fnc, cs.h_pre_final, m.final_norm, eps);
  }
  const MtpState* prev = d == 0 ? nullptr : &cs.mtp[static_cast<std::size_t>(d - 1)];
  // Depth d sees tokens rolled d + 1 steps left and predicts the token d + 1 ahead.
  ms.ids = roll_left(prev ? prev->ids : cs.batch->tokens);
  ms.targets = roll_left(prev ? prev->targets : cs.batch->targets);
  const int b = cs.batch->tokens.dim(0), t = cs.batch->tokens.dim(1), n = b * t, c = cfg.hidden;
  ms.weights = Tf({b, t});
  const float w = cs.mtp_weight[static_cast<std::size_t>(d)];
  for (int i = 0; i < b; ++i)
    for (int j = 0; j + d + 1 < t; ++j) ms.weights[static_cast<std::size_t>(i * t + j)] = w;
  embedding_forward(ms.emb, ms.ids, m.wte);
  rmsnorm_forward(ms.en, ms.enc, ms.emb, md.enorm, eps);
  ms.hin = prev ? prev->hout : cs.h_final;
  rmsnorm_forward(ms.hn, ms.hnc, ms.hin, md.hnorm, eps);
  // Embedding half first, as Megatron concatenates.
  ms.cat = Tf({b, t, 2 * c});
  for (int r = 0; r < n; ++r) {
    std::copy_n(ms.en.ptr() + static_cast<long>(r) * c, c, ms.cat.ptr() + static_cast<long>(r) * 2 * c);
    std::copy_n(ms.hn.ptr() + static_cast<long>(r) * c, c, ms.cat.ptr() + static_cast<long>(r) * 2 * c + c);
  }
  cs.h = Tf({b, t, c});
  cpu::linear_forward<float>(cs.h.ptr(), ms.cat.ptr(), md.eh_proj.ptr(), nullptr, n, 2 * c, c);
  pre_dispatch_forward(md.layer, ms.inner, cs);
}

void Executor::Impl::mtp_post_forward(RankModel& m, int d, ChunkState& cs) const {
  MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
  ms.pre = cs.h;
  rmsnorm_forward(ms.hout, ms.fnc, ms.pre, m.mtp[static_cast<std::size_t>(d)].final_norm, cfg.norm_eps);
}

// d_hout is complete here: its head (post_process) and the next depth's pre_dispatch, which
// both ran before, have added their parts.
void Executor::Impl::mtp_post_backward(RankModel& m, int d, ChunkState& cs) const {
  MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
  MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
  cs.dh = Tf(ms.pre.shape);
  rmsnorm_backward(cs.dh, md.final_norm_g, ms.d_hout, ms.pre, md.final_norm, ms.fnc);
}

void Executor::Impl::mtp_pre_dispatch_backward(RankModel& m, int d, ChunkState& cs, WgradSink<float>* w) const {
  MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
  MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
  pre_dispatch_backward(md.layer, ms.inner, cs, w);
  const int c = cfg.hidden;
  const int n = static_cast<int>(ms.cat.size() / static_cast<std::size_t>(2 * c));
  Tf dcat(ms.cat.shape);
  cpu::linear_backward<float>(dcat.ptr(), ms.eh_proj_staged.ptr(), nullptr, cs.dh.ptr(), ms.cat.ptr(), md.eh_proj.ptr(),
                              n, 2 * c, c, w);
  Tf den(ms.en.shape), dhn(ms.hn.shape);
  for (int r = 0; r < n; ++r) {
    std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c, c, den.ptr() + static_cast<long>(r) * c);
    std::copy_n(dcat.ptr() + static_cast<long>(r) * 2 * c + c, c, dhn.ptr() + static_cast<long>(r) * c);
  }
  Tf demb(ms.emb.shape);
  rmsnorm_backward(demb, ms.enorm_staged, den, ms.emb, md.enorm, ms.enc);
  embedding_backward(m.wte_g, demb, ms.ids);
  Tf dhin(ms.hin.shape);
  rmsnorm_backward(dhin, ms.hnorm_staged, dhn, ms.hin, md.hnorm, ms.hnc);
  // Second consumer of the parked hidden state this depth read: merge into its gradient.
  Tf& parked = d == 0 ? cs.d_h_final : cs.mtp[static_cast<std::size_t>(d - 1)].d_hout;
  if (!options.test_drop_mtp_grad)
    for (std::size_t i = 0; i < parked.size(); ++i) parked[i] += dhin[i];
  if (d > 0) return;
  // The first depth produced h_final: the final norm's backward runs once, merged.
  cs.dh = Tf(cs.h_pre_final.shape);
  rmsnorm_backward(cs.dh, m.final_norm_g, cs.d_h_final, cs.h_pre_final, m.final_norm, cs.fnc);
}

void Executor::Impl::mtp_pre_dispatch_weight(RankModel& m, int d, ChunkState& cs) const {
  MtpDepth& md = m.mtp[static_cast<std::size_t>(d)];
  MtpState& ms = cs.mtp[static_cast<std::size_t>(d)];
  pre_dispatch_weight(md.layer, ms.inner);
  add_tensor(md.eh_proj_g, ms.eh_proj_staged);
  add_tensor(md.enorm_g, ms.enorm_staged);
  add_tensor(md.hnorm_g, ms.hnorm_staged);
}

void Executor::Impl::combine_backward_local(LogicalLayer& layer, LayerState& ls, ChunkState& cs) const {
  MoeState& st = *ls.moe;
  const int c = cfg.hidden;
  // forward: h_out = residual + routed + shared; the residual and the shared output were
  // parked by pre_dispatch, so each gets its gradient here and is merged there.
  st.d_residual = cs.dh;
  if (options.test_drop_residual_grad) st.d_residual.zero();
  st.d_shared = cs.dh;
  st.dperm_out.assign(st.permuted_out.size(), 0.0f);
  st.dw.assign(static_cast<std::size_t>(st.routing.n) * static_cast<std::size_t>(st.routing.k), 0.0f);
  moe_combine_backward<float>(st.routing, st.permuted_out, cs.dh.ptr(), c, st.dperm_out, st.dw);
  (void)layer;
}

void Executor::Impl::mlp_backward_slot(LogicalLayer& layer, LayerState& ls, ChunkState& cs, int ep_rank,
                                       WgradSink<float>* w) const {
  if (layer.terminal < 0) return;
  Block& b = layer.blocks.back();
  if (!layer.moe()) {
    block_backward(b, ls.blocks.back(), cs.dh, w);
    return;
  }
  MoeState& st = *ls.moe;
  const std::size_t c = static_cast<std::size_t>(cfg.hidden);
  runtime::annotate_span("rows", std::to_string(st.layout.expert_start.back()));
  st.dexpert_in.assign(st.expert_in.size(), 0.0f);
  for (int le = 0; le < local_experts; ++le) {
    const std::size_t lo = st.layout.expert_start[static_cast<std::size_t>(le)];
    const std::size_t hi = st.layout.expert_start[static_cast<std::size_t>(le) + 1];
    const auto e = static_cast<std::size_t>(ep_rank * local_experts + le);
    swiglu_backward<float>(st.dexpert_in.data() + lo * c, st.staged.experts[e], st.dexpert_out.data() + lo * c,
                           st.expert_in.data() + lo * c, static_cast<int>(hi - lo), b.moe->p.experts[e],
                           st.expert_caches[static_cast<std::size_t>(le)], w);
  }
}

void Executor::Impl::pre_dispatch_backward(LogicalLayer& layer, LayerState& ls, ChunkState& cs,
                                           WgradSink<float>* w) const {
  if (layer.moe()) {
    Block& b = layer.blocks.back();
    BlockState& bs = ls.blocks.back();
    MoeState& st = *ls.moe;
    const int n = st.routing.n;
    // Same order as moe_backward: shared expert, then unpermute + router, into d(normed).
    Tf dnormed(bs.normed.shape);
    if (b.moe->p.has_shared)
      swiglu_backward<float>(dnormed.ptr(), st.staged.shared, st.d_shared.ptr(), bs.normed.ptr(), n, b.moe->p.shared,
                             st.shared_cache, w);
    moe_route_permute_backward<float>(cfg, b.moe->p, bs.normed.ptr(), st.routing, layer.loss_scale, st.dperm_in, st.dw,
                                      dnormed.ptr(), st.staged);
    cs.dh = st.d_residual;  // the merged gradient of the parked residual...
    rmsnorm_backward(cs.dh, bs.norm_g_staged, dnormed, bs.h_in, b.norm_w, bs.nc);  // ...plus the norm path
  }
  for (int i = layer.pre_count() - 1; i >= 0; --i)
    block_backward(layer.blocks[static_cast<std::size_t>(i)], ls.blocks[static_cast<std::size_t>(i)], cs.dh, w);
}

// Flushes (the end of a slot's weight-gradient step, weight_steps.hpp): staged gradients into
// the parameters' gradients.
void Executor::Impl::pre_dispatch_weight(LogicalLayer& layer, LayerState& ls) const {
  for (int i = 0; i < layer.pre_count(); ++i) {
    Block& b = layer.blocks[static_cast<std::size_t>(i)];
    BlockState& bs = ls.blocks[static_cast<std::size_t>(i)];
    flush_norm(b, bs);
    b.member->flush(*bs.ms);
  }
  if (layer.moe()) {
    Block& b = layer.blocks.back();
    flush_norm(b, ls.blocks.back());
    add_tensor(b.moe->g.router, ls.moe->staged.router);
    if (b.moe->p.has_shared) {
      add_tensor(b.moe->g.shared.fc1, ls.moe->staged.shared.fc1);
      add_tensor(b.moe->g.shared.fc2, ls.moe->staged.shared.fc2);
    }
  }
}

// The other end of a pipeline send or receive (its PointToPoint collective).
const schedule::Node& Executor::Impl::pipe_partner(const schedule::Node& node) const {
  const bool valid = node.collective >= 0 && node.collective < static_cast<int>(plan.collectives.size());
  const schedule::Collective* c = valid ? &plan.collectives[static_cast<std::size_t>(node.collective)] : nullptr;
  if (!c || c->kind != schedule::CollectiveKind::PointToPoint || c->nodes.size() != 2)
    fail("pipeline node " + node.label() + " has no point-to-point partner");
  const schedule::Node& peer = plan.node(c->nodes[0] == node.id ? c->nodes[1] : c->nodes[0]);
  const Slot want = node.slot == Slot::PipeSend ? Slot::PipeRecv : Slot::PipeSend;
  if (peer.slot != want || peer.phase != node.phase || peer.microbatch != node.microbatch || peer.rank == node.rank)
    fail("pipeline node " + node.label() + " is paired with " + peer.label() + " of rank " + std::to_string(peer.rank));
  return peer;
}

void Executor::Impl::mlp_weight(LogicalLayer& layer, LayerState& ls, int ep_rank) const {
  if (layer.terminal < 0) return;
  Block& b = layer.blocks.back();
  if (!layer.moe()) {
    flush_norm(b, ls.blocks.back());
    b.member->flush(*ls.blocks.back().ms);
    return;
  }
  for (int le = 0; le < local_experts; ++le) {
    const auto e = static_cast<std::size_t>(ep_rank * local_experts + le);
    add_tensor(b.moe->g.experts[e].fc1, ls.moe->staged.experts[e].fc1);
    add_tensor(b.moe->g.experts[e].fc2, ls.moe->staged.experts[e].fc2);
  }
}

void Executor::Impl::add_tensor(Tf& dst, const Tf& src) {
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
}

Executor::~Executor() = default;
Executor::Executor(Executor&&) noexcept = default;
Executor& Executor::operator=(Executor&&) noexcept = default;

int Executor::ranks() const { return impl_->nranks; }
const schedule::Plan& Executor::plan() const { return impl_->plan; }

int Executor::data_ranks() const { return impl_->plan.dp; }
int Executor::pipeline_stage(int rank) const { return impl_->at(rank).pp_rank; }

double check_step_batches(const std::vector<std::vector<Batch>>& batches, int ranks, int microbatches, int vocab,
                          const std::string& who) {
  if (static_cast<int>(batches.size()) != ranks)
    throw EngineError(ErrorCode::BadInput, who + ": need batches for " + std::to_string(ranks) + " data-parallel ranks");
  double tokens = 0;
  for (const auto& rb : batches) {
    if (static_cast<int>(rb.size()) != microbatches)
      throw EngineError(ErrorCode::BadInput, who + ": need " + std::to_string(microbatches) + " microbatches per rank");
    for (const auto& b : rb) {
      if (b.tokens.rank() != 2 || b.tokens.shape != b.targets.shape)
        throw EngineError(ErrorCode::BadInput, "batch tokens and targets must both be (B, T)");
      for (const auto* ids : {&b.tokens.data, &b.targets.data})
        for (int id : *ids)
          if (id < 0 || id >= vocab)
            throw EngineError(ErrorCode::BadInput,
                              std::string(ids == &b.tokens.data ? "token" : "target") + " id outside the vocabulary");
      tokens += static_cast<double>(b.tokens.size());
    }
  }
  return tokens;
}

std::vector<float> mtp_weights(const std::vector<std::vector<Batch>>& batches, int depths, float scaling) {
  std::vector<float> w(static_cast<std::size_t>(std::max(depths, 0)), 0.0f);
  for (int d = 0; d < depths; ++d) {
    long valid = 0;
    for (const auto& rb : batches)
      for (const auto& b : rb) valid += static_cast<long>(b.tokens.dim(0)) * std::max(0, b.tokens.dim(1) - (d + 1));
    if (valid > 0) w[static_cast<std::size_t>(d)] = scaling / static_cast<float>(depths) / static_cast<float>(valid);
  }
  return w;
}

namespace {

// What one plan node of a rank does, as a closure on that rank's state (model `m`, its chunks,
// EP shard `ep`, the W ledger and its EP and pipeline communicators); the node's references are
// checked here (microbatch, layer, MoE).
runtime::Work node_work(Executor::Impl& im, const schedule::Node& node, RankModel& m,
                        std::vector<std::vector<ChunkState>>& rank_chunks, int ep, WeightSteps<CpuMemory, float>& steps,
                        runtime::Communicator& comm, runtime::Communicator& pipe) {
  if (node.microbatch < 0 || node.microbatch >= im.plan.microbatches)
    throw EngineError(ErrorCode::BadConfig,
                      "executor: node " + node.label() + " names microbatch " + std::to_string(node.microbatch));
  ChunkState& cs =
      rank_chunks[static_cast<std::size_t>(node.microbatch)][static_cast<std::size_t>(node.vp_stage)];
  // An MTP depth's dispatch, mlp and combine are its inner layer's; pre_dispatch and mtp_post
  // add the depth's own work around it.
  LogicalLayer* layer = nullptr;
  LayerState* ls = nullptr;
  const int depth = node.mtp ? node.layer : -1;
  if (node.mtp) {
    layer = &m.mtp.at(static_cast<std::size_t>(depth)).layer;
    ls = &cs.mtp.at(static_cast<std::size_t>(depth)).inner;
  } else if (node.layer >= 0) {
    layer = &m.layers.at(static_cast<std::size_t>(node.layer));
    ls = &cs.layers.at(static_cast<std::size_t>(node.layer));
  }
  if ((node.slot == Slot::Dispatch || node.slot == Slot::Combine) && (!layer || !layer->moe()))
    throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " is a comm node of a dense layer");
  if (node.layer < 0 && node.slot != Slot::PreProcess && node.slot != Slot::PostProcess && node.slot != Slot::PipeSend &&
      node.slot != Slot::PipeRecv)
    throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " names no layer");
  runtime::Work work;
  switch (node.slot) {
    case Slot::PreProcess:
      if (node.phase == Phase::Forward) work = [&im, &m, &cs] { im.pre_process_forward(m, cs); };
      else work = [&im, &m, &cs] { im.pre_process_backward(m, cs); };
      break;
    case Slot::PostProcess:
      if (node.phase == Phase::Forward) work = [&im, &m, &cs] { im.post_process_forward(m, cs); };
      else work = [&im, &m, &cs] { im.post_process_backward(m, cs); };
      break;
    case Slot::PreDispatch:
      if (node.mtp) {
        auto flush = [&im, &m, depth, &cs] { im.mtp_pre_dispatch_weight(m, depth, cs); };
        if (node.phase == Phase::Forward) work = [&im, &m, depth, &cs] { im.mtp_pre_dispatch_forward(m, depth, cs); };
        else if (node.phase == Phase::Backward)
          work = [&im, &m, depth, &cs, &steps, &node, flush] {
            steps.backward(node, [&](WgradSink<float>* w) { im.mtp_pre_dispatch_backward(m, depth, cs, w); }, flush);
          };
        else work = [&steps, &node, flush] { steps.weight(node, flush); };
        break;
      }
      if (node.phase == Phase::Forward) work = [&im, layer, ls, &cs] { im.pre_dispatch_forward(*layer, *ls, cs); };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, &steps, &node] {
          steps.backward(node, [&](WgradSink<float>* w) { im.pre_dispatch_backward(*layer, *ls, cs, w); },
                         [&] { im.pre_dispatch_weight(*layer, *ls); });
        };
      else work = [&im, layer, ls, &steps, &node] { steps.weight(node, [&] { im.pre_dispatch_weight(*layer, *ls); }); };
      break;
    case Slot::MtpPost:
      if (!node.mtp)
        throw EngineError(ErrorCode::BadConfig, "executor: node " + node.label() + " is mtp_post of a decoder layer");
      // The final norm's weight gradient is never delayed (the slot has no W node).
      if (node.phase == Phase::Forward) work = [&im, &m, depth, &cs] { im.mtp_post_forward(m, depth, cs); };
      else if (node.phase == Phase::Backward) work = [&im, &m, depth, &cs] { im.mtp_post_backward(m, depth, cs); };
      break;
    case Slot::Mlp:
      if (node.phase == Phase::Forward) work = [&im, layer, ls, &cs, ep] { im.mlp_forward_slot(*layer, *ls, cs, ep); };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, ep, &steps, &node] {
          steps.backward(node, [&](WgradSink<float>* w) { im.mlp_backward_slot(*layer, *ls, cs, ep, w); },
                         [&] { im.mlp_weight(*layer, *ls, ep); });
        };
      else work = [&im, layer, ls, ep, &steps, &node] { steps.weight(node, [&] { im.mlp_weight(*layer, *ls, ep); }); };
      break;
    case Slot::Dispatch:
      if (node.phase == Phase::Forward)
        work = [&im, ls, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_experts(comm, st.routing, st.permuted_in, st.layout, true, st.expert_in, "dispatch");
        };
      else if (node.phase == Phase::Backward)
        work = [&im, ls, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_tokens(comm, st.routing, st.layout, st.dexpert_in, st.dperm_in, st.permuted_in.size() / static_cast<std::size_t>(im.cfg.hidden),
                                "dispatch backward");
        };
      break;
    case Slot::Combine:
      if (node.phase == Phase::Forward)
        work = [&im, layer, ls, &cs, &comm] {
          MoeState& st = *ls->moe;
          im.exchange_to_tokens(comm, st.routing, st.layout, st.expert_out, st.permuted_out,
                                st.permuted_in.size() / static_cast<std::size_t>(im.cfg.hidden), "combine");
          im.combine_forward_local(*layer, *ls, cs);
        };
      else if (node.phase == Phase::Backward)
        work = [&im, layer, ls, &cs, &comm] {
          im.combine_backward_local(*layer, *ls, cs);
          MoeState& st = *ls->moe;
          im.exchange_to_experts(comm, st.routing, st.dperm_out, st.layout, false, st.dexpert_out, "combine backward");
        };
      break;
    case Slot::PipeSend:
    case Slot::PipeRecv: {
      // Activations forward, their gradients backward, between neighbouring model chunks;
      // buffered send, blocking receive, both on the comm stream in plan order.
      const schedule::Node& peer = im.pipe_partner(node);
      const bool fwd = node.phase == Phase::Forward;
      const int recv_vp = node.slot == Slot::PipeSend ? peer.vp_stage : node.vp_stage;
      const int tag = (node.microbatch * im.plan.chunks + recv_vp) * 2 + (fwd ? 0 : 1);
      if (node.slot == Slot::PipeSend)
        work = [&pipe, &cs, fwd, to = peer.rank, tag] {
          const Tf& t = fwd ? cs.h : cs.dh;
          pipe.send<float>(to, tag, std::span<const float>(t.data), fwd ? "pipeline activations" : "pipeline gradients");
        };
      else
        work = [&pipe, &cs, fwd, from = peer.rank, tag, c = im.cfg.hidden] {
          Tf& t = fwd ? cs.h : cs.dh;
          std::vector<int> shape = cs.batch->tokens.shape;
          shape.push_back(c);
          t = Tf(shape);
          pipe.recv<float>(from, tag, std::span<float>(t.data), fwd ? "pipeline activations" : "pipeline gradients");
        };
      break;
    }
    default:
      throw EngineError(ErrorCode::BadConfig, std::string("executor: slot ") + std::string(schedule::to_string(node.slot)) +
                                                  " is not supported yet");
  }
  return work;
}

// `node`'s work (called in issue order) with the layer state it begins or ends, and the chunk's
// tensors it ends (StateLifetimes), around it, on the stream.
runtime::Work with_lifetimes(StateLifetimes& lifetimes, Executor::Impl& im, RankModel& m, ChunkState& chunk,
                             const schedule::Node& node, runtime::Work inner) {
  const auto l = static_cast<std::size_t>(node.layer);
  const auto ends = lifetimes.next(node, node.layer >= 0 && !node.mtp && m.layers.at(l).held);
  if (!ends.first && !ends.last && !ends.chunk_done) return inner;
  return [&im, &m, &chunk, inner = std::move(inner), ends, l] {
    if (ends.first) chunk.layers[l] = im.new_layer_state(m.layers[l]);
    inner();
    if (ends.last) {
      if (const MoeState* st = chunk.layers[l].moe.get())
        chunk.router_loss[l] = static_cast<double>(st->routing.aux_loss) + static_cast<double>(st->routing.z_loss);
      chunk.layers[l] = LayerState{};
    }
    if (ends.chunk_done) chunk.release_tensors();
  };
}

// The data-parallel all-reduce of a rank's gradients, in parameter order: the non-expert ones over
// the stage's DP group, or (DP > EP) the experts it holds over their replicas (the EDP group).
runtime::Work grad_all_reduce_work(const schedule::Node& node, RankModel& m, runtime::Communicator& dp_comm,
                                   runtime::Communicator& edp_comm) {
  if (node.symbols != "expert" && node.symbols != "non_expert")
    fail("all-reduce " + node.label() + " of '" + node.symbols + "' gradients is not run");
  const bool experts = node.symbols == "expert";
  runtime::Communicator& comm = experts ? edp_comm : dp_comm;
  return [&m, &comm, experts] {
    std::vector<float> buf;
    auto params = list_params(m);
    for (auto& p : params)
      if ((p.expert >= 0) == experts) buf.insert(buf.end(), p.grad->data.begin(), p.grad->data.end());
    runtime::mark_span_cpu("pre_cpu_us");
    comm.all_reduce_sum(buf.data(), buf.size(), experts ? "expert gradient all-reduce" : "gradient all-reduce");
    std::size_t at = 0;
    for (auto& p : params)
      if ((p.expert >= 0) == experts) {
        std::copy_n(buf.begin() + static_cast<long>(at), p.grad->size(), p.grad->data.begin());
        at += p.grad->size();
      }
  };
}

}  // namespace

void Executor::zero_grad() {
  for (int r = 0; r < impl_->nranks; ++r)
    for (auto& p : parameters(r)) p.grad->zero();
}

StepResult Executor::step(const std::vector<std::vector<Batch>>& batches) {
  auto& im = *impl_;
  const int mbs = im.plan.microbatches, dp = im.plan.dp, pp = im.plan.pp, vpp = im.plan.chunks;
  const int n_layers = static_cast<int>(im.stages.layer_stage.size());
  const double tokens = check_step_batches(batches, dp, mbs, im.cfg.vocab_size, "executor");
  const float weight = static_cast<float>(1.0 / tokens);
  const std::vector<float> mtp_weight = mtp_weights(batches, im.pattern.mtp_depths, im.cfg.mtp_loss_scaling);

  runtime::CpuWorldOptions wo;
  wo.ranks = im.nranks;
  wo.link = im.options.link;
  wo.comm_realtime = im.options.comm_realtime;
  runtime::CpuWorld world(wo);
  // Per pipeline stage: one DP group over its DP ranks (the non-expert gradients' all-reduce);
  // EP groups of EP consecutive DP ranks (the all-to-alls); EDP groups of the DP ranks holding the
  // same experts (their gradients' all-reduce, DP > EP). One group of all ranks carries the
  // pipeline's point-to-point transfers, addressed by global rank. Each by global rank:
  const int ep_n = im.plan.ep;
  using Comms = std::vector<std::unique_ptr<runtime::Communicator>>;
  Comms dp_of(static_cast<std::size_t>(im.nranks)), ep_of(dp_of.size()), edp_of(dp_of.size());
  const auto group = [&](Comms& to, const std::string& name, const std::vector<int>& members) {
    auto made = world.transport().create_group(name, members);
    for (std::size_t i = 0; i < members.size(); ++i) to[static_cast<std::size_t>(members[i])] = std::move(made[i]);
  };
  for (int s = 0; s < pp; ++s) {
    std::vector<int> all;
    for (int d = 0; d < dp; ++d) all.push_back(im.rank_of(s, d));
    group(dp_of, "dp" + std::to_string(s), all);
    for (int g = 0; g < dp / ep_n; ++g) {
      std::vector<int> ep_members;
      for (int k = 0; k < ep_n; ++k) ep_members.push_back(im.rank_of(s, g * ep_n + k));
      group(ep_of, "ep" + std::to_string(s) + "." + std::to_string(g), ep_members);
    }
    for (int k = 0; k < ep_n; ++k) {
      std::vector<int> replicas;
      for (int g = 0; g < dp / ep_n; ++g) replicas.push_back(im.rank_of(s, g * ep_n + k));
      group(edp_of, "edp" + std::to_string(s) + "." + std::to_string(k), replicas);
    }
  }
  std::vector<int> everyone(static_cast<std::size_t>(im.nranks));
  for (int r = 0; r < im.nranks; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto pipe_comms = world.transport().create_group("pipeline", everyone);

  // chunks[rank][microbatch][vp_stage]
  std::vector<std::vector<std::vector<ChunkState>>> chunks(static_cast<std::size_t>(im.nranks));
  for (int r = 0; r < im.nranks; ++r) {
    const RankLayout& lo = im.at(r);
    auto& rc = chunks[static_cast<std::size_t>(r)];
    rc.resize(static_cast<std::size_t>(mbs));
    for (int mb = 0; mb < mbs; ++mb) {
      rc[static_cast<std::size_t>(mb)].resize(static_cast<std::size_t>(vpp));
      for (int vp = 0; vp < vpp; ++vp) {
        auto& cs = rc[static_cast<std::size_t>(mb)][static_cast<std::size_t>(vp)];
        cs.batch = &batches[static_cast<std::size_t>(lo.dp_rank)][static_cast<std::size_t>(mb)];
        cs.weight = weight;
        cs.layers.resize(static_cast<std::size_t>(n_layers));  // built by the layer's first node
        cs.router_loss.assign(static_cast<std::size_t>(n_layers), 0.0);
        if (lo.last && vp == vpp - 1) {
          for (auto& md : im.models[static_cast<std::size_t>(r)].mtp) cs.mtp.push_back(im.new_mtp_state(md));
          cs.mtp_weight = mtp_weight;
        }
      }
    }
  }
  // The W nodes' state (weight_steps.hpp). A slot the plan gives no W node (no delayed wgrad, or
  // nothing to delay: e.g. a lone 'E', whose router and norm gradients Megatron computes in the
  // backward itself) runs its weight GEMMs in its backward and flushes right after it.
  WeightSteps<CpuMemory, float> steps(im.plan, 0, im.nranks);

  // Each rank's host thread walks its own issue order (plan_walk.hpp), after a walk over every
  // rank that refuses a plan whose ranks would wait for each other forever.
  const auto issue = issue_orders(im.plan, im.options.test_weight_fault, kWho);
  refuse_deadlock(im.plan, issue, kWho);
  world.run([&](runtime::RankContext& ctx) {
    const int r = ctx.rank;
    const RankLayout& lo = im.at(r);
    const int ep = lo.ep_rank;  // which shard of the experts this rank holds
    RankModel& m = im.models[static_cast<std::size_t>(r)];
    runtime::Communicator& dp_comm = *dp_of[static_cast<std::size_t>(r)];
    runtime::Communicator& comm = *ep_of[static_cast<std::size_t>(r)];
    runtime::Communicator& edp_comm = *edp_of[static_cast<std::size_t>(r)];
    runtime::Communicator& pipe = *pipe_comms[static_cast<std::size_t>(r)];
    runtime::EventChains chains([&ctx] { return ctx.make_event(); });
    StateLifetimes lifetimes(im.plan, issue[static_cast<std::size_t>(r)]);
    const auto run_node = [&](const schedule::Node& node) {
      runtime::Stream& stream = ctx.stream(node.stream == schedule::Stream::Comm ? runtime::kCommStream : runtime::kComputeStream);
      runtime::WorkLabel label{node.label(), std::string(schedule::to_string(node.slot)), schedule::node_args(node)};
      if (node.slot == Slot::GradAllReduce) {
        chains.wait_all(stream);
        stream.enqueue(grad_all_reduce_work(node, m, dp_comm, edp_comm), label);
        return;
      }
      runtime::Work work = node_work(im, node, m, chunks[static_cast<std::size_t>(r)], ep, steps, comm, pipe);
      if (!work) fail("node " + node.label() + " has no action");
      // The GEMM work the node did (cpu::gemm_flops, a counter of the stream's thread): where the
      // weight-gradient GEMMs ran, readable from the timeline.
      work = [inner = std::move(work)] {
        const double before = cpu::gemm_flops();
        inner();
        runtime::annotate_span("gemm_flops", flops_text(cpu::gemm_flops() - before));
      };
      ChunkState& chunk = chunks[static_cast<std::size_t>(r)][static_cast<std::size_t>(node.microbatch)]
                                [static_cast<std::size_t>(node.vp_stage)];
      work = with_lifetimes(lifetimes, im, m, chunk, node, std::move(work));
      chains.issue(runtime::ChainKey{node.microbatch, node.vp_stage}, stream, std::move(work), std::move(label));
    };
    // A range of one rank: its collectives go to it as it reaches them; the transport meets them.
    walk_plan(im.plan, issue, r, r + 1, kWho, run_node, [&](const std::vector<const schedule::Node*>& members) {
      for (const schedule::Node* node : members)
        if (node->rank == r) run_node(*node);
    });
  });
  steps.finish();

  // Losses per (DP rank, microbatch), summed as the single-stage run sums them: router losses
  // in layer order (from whichever stage holds the layer, MTP depths last), then the main loss
  // of the last stage, then the MTP depths' losses (HybridModel's LossBreakdown::total).
  StepResult result;
  result.loss.assign(static_cast<std::size_t>(dp), std::vector<double>(static_cast<std::size_t>(mbs), 0.0));
  for (int d = 0; d < dp; ++d)
    for (int mb = 0; mb < mbs; ++mb) {
      double aux = 0;
      for (int l = 0; l < n_layers; ++l) {
        const auto r = static_cast<std::size_t>(im.rank_of(im.stages.layer_stage[static_cast<std::size_t>(l)], d));
        const auto vp = static_cast<std::size_t>(im.stages.layer_vp[static_cast<std::size_t>(l)]);
        aux += chunks[r][static_cast<std::size_t>(mb)][vp].router_loss[static_cast<std::size_t>(l)];
      }
      const auto last = static_cast<std::size_t>(im.rank_of(pp - 1, d));
      const ChunkState& head = chunks[last][static_cast<std::size_t>(mb)][static_cast<std::size_t>(vpp - 1)];
      for (const auto& ms : head.mtp)
        if (const MoeState* st = ms.inner.moe.get())
          aux += static_cast<double>(st->routing.aux_loss) + static_cast<double>(st->routing.z_loss);
      double total = head.loss + aux;
      for (const auto& ms : head.mtp) total += ms.loss;
      result.loss[static_cast<std::size_t>(d)][static_cast<std::size_t>(mb)] = total;
      result.total += total;
      result.lm += head.loss;
    }
  result.timeline = world.timeline();
  result.timeline.source = "engine";
  result.timeline.metadata["schedule"] = im.plan.schedule;
  result.timeline.metadata["pattern"] = im.plan.pattern;
  result.timeline.metadata["pp"] = std::to_string(pp);
  result.timeline.metadata["vpp"] = std::to_string(vpp);
  return result;
}

}  // namespace ht::engine::exec
