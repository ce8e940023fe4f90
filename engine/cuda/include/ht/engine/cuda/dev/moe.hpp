// CUDA layers, part 4: the MoE branch of 'E' on one rank (dropless, softmax top-k router with the
// lower-index tie-break, post-top-k softmax combine weights, switch aux loss and z-loss, optional
// shared expert) over a device policy D (dev/host.hpp); math and orders as layers/moe.hpp.
// Per-token work (router softmax, top-k, combine, unpermute) is one thread per token. The
// permutation and the two losses are small host computations on downloaded (N, k) indices and
// (N, E) probabilities, in the CPU's loops, which also gives the host the per-expert row counts
// it needs to issue each expert's GEMMs.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/cuda/dev/basic.hpp"
#include "ht/engine/cpu/ops.hpp"
#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/dev/swiglu.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

template <class T>
struct MoeW {
  const T* router = nullptr;          // (E, C)
  std::vector<SwiGLUW<T>> experts;    // E
  bool has_shared = false;
  SwiGLUW<T> shared;
};
template <class T>
struct MoeGrad {
  T* router = nullptr;
  std::vector<SwiGLUGrad<T>> experts;
  bool has_shared = false;  // as MoeW's (MoeParams' visit reads it)
  SwiGLUGrad<T> shared;
};

template <class D, class T>
struct MoeCacheD {
  int n = 0, e = 0, k = 0;
  Buf<D, T> logits, probs, lse, topk_w;  // (N, E), (N, E), (N), (N, k)
  Buf<D, int> topk_idx, perm_row, row_token;  // (N, k), (N, k), (N k)
  std::vector<int> tokens_per_expert, expert_offset;  // host: (E), (E + 1)
  T aux_loss = T(0), z_loss = T(0);
  Buf<D, T> permuted_in, permuted_out;  // (N k, C)
  std::vector<SwiGLUCacheD<D, T>> expert_caches;
  SwiGLUCacheD<D, T> shared_cache;
  Buf<D, T> shared_out;  // (N, C), the shared expert's output (forward, added at the combine)
  Buf<D, T> dpo, dw, dpi;  // backward between the pieces: d permuted_out, d combine weights, d permuted_in
};

// Expert parallelism (dev/executor.hpp): the experts [first, first + count) of one rank and the
// rows they process from every rank, expert-major with the sources in rank order inside each
// expert (the CPU executor's EpLayout). The executor's exchanges fill `in` (forward) and `dout`
// (backward) from the ranks' permuted rows and send `out` and `din` back.
template <class D, class T>
struct MoeShardD {
  int first = 0, count = 0;
  std::vector<std::vector<int>> counts;  // [source rank][local expert]: rows
  std::vector<std::vector<int>> offset;  // [source rank][local expert]: first row in the buffers
  std::vector<int> start;                // [local expert] first row; back() = rows
  Buf<D, T> in, out, dout, din;          // (rows, C)
  std::vector<SwiGLUCacheD<D, T>> caches;
  int rows() const { return start.empty() ? 0 : start.back(); }
};

// The branch in the pieces of the schedule's slots (reference 3.3): route_permute (pre_dispatch:
// router, top-k, losses, permutation, gather, and the shared expert), experts (mlp), combine
// (combine: weighted sum + shared output). moe_forward runs the three in order. x, out (n, C);
// out is overwritten. aux/z losses of this call are left in the cache.
template <class D, class T>
void moe_route_permute(const ModelConfig& cfg, const MoeW<T>& w, const T* x, int n, int c, MoeCacheD<D, T>& cache,
                       T loss_scale) {
  const int e = static_cast<int>(w.experts.size()), k = cfg.moe_topk;
  if (k < 1 || k > e)
    throw std::invalid_argument("moe: need 1 <= topk (" + std::to_string(k) + ") <= num_experts (" + std::to_string(e) + ")");
  cache.n = n;
  cache.e = e;
  cache.k = k;
  const std::size_t nk = static_cast<std::size_t>(n) * k;
  cache.logits.resize(static_cast<std::size_t>(n) * e);
  cache.probs.resize(cache.logits.size());
  cache.lse.resize(static_cast<std::size_t>(n));
  cache.topk_w.resize(nk);
  cache.topk_idx.resize(nk);
  T *lg = cache.logits.get(), *pr = cache.probs.get(), *lse = cache.lse.get(), *tw = cache.topk_w.get();
  int* ti = cache.topk_idx.get();
  D::gemm(lg, x, w.router, n, e, c, false, true, false);
  D::launch(n, [=] HT_HD(long i) {
    const T* row = lg + i * e;
    math::softmax_row(pr + i * e, row, e);
    lse[i] = math::logsumexp_row(row, e);
    int* chosen = ti + i * k;
    cpu::topk_row(chosen, row, e, k);  // ties -> lower expert index
    T* wi = tw + i * k;
    for (int j = 0; j < k; ++j) wi[j] = row[chosen[j]];
    math::softmax_row(wi, wi, k);  // in place: each input is read before it is overwritten
  });

  // Permutation on the host: expert-major, token order within an expert (stable counting sort).
  std::vector<int> idx(nk);
  D::download(idx.data(), ti, nk);
  cache.tokens_per_expert.assign(static_cast<std::size_t>(e), 0);
  for (const int ex : idx) ++cache.tokens_per_expert[static_cast<std::size_t>(ex)];
  cache.expert_offset.assign(static_cast<std::size_t>(e) + 1, 0);
  for (int ex = 0; ex < e; ++ex)
    cache.expert_offset[static_cast<std::size_t>(ex) + 1] =
        cache.expert_offset[static_cast<std::size_t>(ex)] + cache.tokens_per_expert[static_cast<std::size_t>(ex)];
  std::vector<int> fill(cache.expert_offset.begin(), cache.expert_offset.end() - 1);
  std::vector<int> perm(nk), row_token(nk);
  for (std::size_t ij = 0; ij < nk; ++ij) {
    const int row = fill[static_cast<std::size_t>(idx[ij])]++;
    perm[ij] = row;
    row_token[static_cast<std::size_t>(row)] = static_cast<int>(ij / static_cast<std::size_t>(k));
  }
  cache.perm_row = upload<D>(perm.data(), nk);
  cache.row_token = upload<D>(row_token.data(), nk);

  // Losses on the host, summed over experts then tokens in index order (the CPU's loops).
  std::vector<T> probs(cache.probs.size()), lse_h(static_cast<std::size_t>(n));
  D::download(probs.data(), pr, probs.size());
  D::download(lse_h.data(), lse, lse_h.size());
  T aux = T(0);
  for (int ex = 0; ex < e; ++ex) {
    T col = T(0);
    for (int i = 0; i < n; ++i) col += probs[static_cast<std::size_t>(i) * e + ex];
    aux += col * static_cast<T>(cache.tokens_per_expert[static_cast<std::size_t>(ex)]);
  }
  const T nn = static_cast<T>(n);
  cache.aux_loss = loss_scale * static_cast<T>(e) * static_cast<T>(cfg.moe_aux_loss_coeff) /
                   (static_cast<T>(k) * nn * nn) * aux;
  T z = T(0);
  for (const T l : lse_h) z += l * l;
  cache.z_loss = loss_scale * static_cast<T>(cfg.moe_z_loss_coeff) * z / nn;

  // Gather (and the shared expert, which reads the same normalised tokens).
  cache.permuted_in.resize(nk * c);
  cache.permuted_out.assign_zero(nk * c);
  T* pin = cache.permuted_in.get();
  const int* rt = cache.row_token.get();
  D::launch(static_cast<long>(nk), [=] HT_HD(long r) { cpu::gather_rows(pin + r * c, x, rt + r, 1, c); });
  if (w.has_shared) {
    cache.shared_out.resize(static_cast<std::size_t>(n) * c);
    swiglu_forward<D, T>(cache.shared_out.get(), cache.shared_cache, x, n, w.shared);
  }
}

// Experts [first, first + starts.size() - 1) over an expert-major buffer: expert first + j
// processes rows [starts[j], starts[j + 1]) of in (rows, C) into out. One rank's experts on the
// rows of all ranks (expert parallelism), or every expert on one rank's permuted rows.
template <class D, class T>
void experts_forward(const MoeW<T>& w, int first, const std::vector<int>& starts, const T* in, T* out, int c,
                     std::vector<SwiGLUCacheD<D, T>>& caches) {
  const std::size_t count = starts.size() - 1;
  caches.resize(count);
  for (std::size_t j = 0; j < count; ++j) {
    const long lo = static_cast<long>(starts[j]) * c;
    swiglu_forward<D, T>(out + lo, caches[j], in + lo, starts[j + 1] - starts[j],
                         w.experts[static_cast<std::size_t>(first) + j]);
  }
}
// din (rows, C) accumulates; the experts' weight gradients accumulate (through `wgrad`, the mlp
// slot's W node, when given).
template <class D, class T>
void experts_backward(const MoeW<T>& w, const MoeGrad<T>& grads, int first, const std::vector<int>& starts, const T* in,
                      const T* dout, T* din, int c, const std::vector<SwiGLUCacheD<D, T>>& caches,
                      WgradSink<T>* wgrad = nullptr) {
  for (std::size_t j = 0; j + 1 < starts.size(); ++j) {
    const long lo = static_cast<long>(starts[j]) * c;
    const std::size_t e = static_cast<std::size_t>(first) + j;
    swiglu_backward<D, T>(din + lo, grads.experts[e], dout + lo, in + lo, starts[j + 1] - starts[j], w.experts[e],
                          caches[j], wgrad);
  }
}

template <class D, class T>
void moe_experts_forward(const MoeW<T>& w, int c, MoeCacheD<D, T>& cache) {
  experts_forward<D, T>(w, 0, cache.expert_offset, cache.permuted_in.get(), cache.permuted_out.get(), c,
                        cache.expert_caches);
}

template <class D, class T>
void moe_combine_forward(const MoeW<T>& w, T* out, int c, const MoeCacheD<D, T>& cache) {
  const int n = cache.n, k = cache.k;
  const T* tw = cache.topk_w.get();
  const T* pout = cache.permuted_out.get();
  const int* pr_row = cache.perm_row.get();
  D::launch(n, [=] HT_HD(long i) {
    T* yi = out + i * c;
    for (int d = 0; d < c; ++d) yi[d] = T(0);
    for (int j = 0; j < k; ++j) {
      const T wj = tw[i * k + j];
      const T* o = pout + static_cast<long>(pr_row[i * k + j]) * c;
      for (int d = 0; d < c; ++d) yi[d] += wj * o[d];
    }
  });
  if (w.has_shared) add_inplace<D, T>(out, cache.shared_out.get(), static_cast<long>(n) * c);
}

template <class D, class T>
void moe_forward(const ModelConfig& cfg, const MoeW<T>& w, const T* x, T* out, int n, int c, MoeCacheD<D, T>& cache,
                 T loss_scale) {
  moe_route_permute<D, T>(cfg, w, x, n, c, cache, loss_scale);
  moe_experts_forward<D, T>(w, c, cache);
  moe_combine_forward<D, T>(w, out, c, cache);
}

// Backward in the same three pieces, run in reverse slot order: combine (the shared expert's
// backward into dx, then d permuted_out and d combine weights), experts (d permuted_in), and
// route_permute (unpermute into dx, the router). dx and the weight gradients accumulate; d total
// loss / d aux = d / d z = 1. The order of the additions into dx is the CPU's (moe.cpp). With a
// sink the shared expert's (combine) or the experts' (experts) weight GEMMs go to it; the router's
// gradient is always computed here (Megatron's router is not a delayed-wgrad linear layer).
template <class D, class T>
void moe_combine_backward(const MoeW<T>& w, const T* x, const T* dy, T* dx, const MoeGrad<T>& grads, int c,
                          MoeCacheD<D, T>& cache, WgradSink<T>* wgrad = nullptr) {
  const int n = cache.n, k = cache.k;
  const std::size_t nk = static_cast<std::size_t>(n) * k;
  if (w.has_shared) swiglu_backward<D, T>(dx, grads.shared, dy, x, n, w.shared, cache.shared_cache, wgrad);
  // combine: y_x = sum_j w_xj permuted_out[perm(x, j)]
  cache.dpo.assign_zero(nk * c);
  cache.dw.assign_zero(nk);
  T *dpo = cache.dpo.get(), *dw = cache.dw.get();
  const T* pout = cache.permuted_out.get();
  const T* tw = cache.topk_w.get();
  const int* pr_row = cache.perm_row.get();
  D::launch(n, [=] HT_HD(long i) {
    const T* dyi = dy + i * c;
    for (int j = 0; j < k; ++j) {
      const long ij = i * k + j;
      const long row = static_cast<long>(pr_row[ij]) * c;
      const T wj = tw[ij];
      T s = T(0);
      for (int d = 0; d < c; ++d) {
        dpo[row + d] += wj * dyi[d];
        s += dyi[d] * pout[row + d];
      }
      dw[ij] += s;
    }
  });
}

template <class D, class T>
void moe_experts_backward(const MoeW<T>& w, const MoeGrad<T>& grads, int c, MoeCacheD<D, T>& cache,
                          WgradSink<T>* wgrad = nullptr) {
  cache.dpi.assign_zero(static_cast<std::size_t>(cache.n) * cache.k * c);
  experts_backward<D, T>(w, grads, 0, cache.expert_offset, cache.permuted_in.get(), cache.dpo.get(), cache.dpi.get(), c,
                         cache.expert_caches, wgrad);
}

template <class D, class T>
void moe_route_permute_backward(const ModelConfig& cfg, const MoeW<T>& w, const T* x, T* dx, const MoeGrad<T>& grads,
                                int c, T loss_scale, MoeCacheD<D, T>& cache) {
  const int n = cache.n, e = cache.e, k = cache.k;
  const std::size_t nk = static_cast<std::size_t>(n) * k;
  const T* dpi = cache.dpi.get();
  const T* dw = cache.dw.get();
  const T* tw = cache.topk_w.get();
  const int* pr_row = cache.perm_row.get();
  // unpermute: dx_x += sum_j dpermuted_in[perm(x, j)], j increasing
  D::launch(n, [=] HT_HD(long i) {
    T* d = dx + i * c;
    for (int j = 0; j < k; ++j) {
      const T* src = dpi + static_cast<long>(pr_row[i * k + j]) * c;
      for (int q = 0; q < c; ++q) d[q] += src[q];
    }
  });
  // router: post-top-k softmax, aux loss (tokens_i a count: no gradient) and z-loss
  const T nn = static_cast<T>(n);
  const T aux_coef = loss_scale * static_cast<T>(e) * static_cast<T>(cfg.moe_aux_loss_coeff) / (static_cast<T>(k) * nn * nn);
  const T z_coef = loss_scale * static_cast<T>(cfg.moe_z_loss_coeff) / nn;
  std::vector<T> dp_h(static_cast<std::size_t>(e));
  for (int ex = 0; ex < e; ++ex)
    dp_h[static_cast<std::size_t>(ex)] = aux_coef * static_cast<T>(cache.tokens_per_expert[static_cast<std::size_t>(ex)]);
  const Buf<D, T> dp_buf = upload<D>(dp_h.data(), dp_h.size());
  Buf<D, T> dl_buf, dsel_buf;
  dl_buf.assign_zero(static_cast<std::size_t>(n) * e);
  dsel_buf.assign_zero(nk);
  T *dl = dl_buf.get(), *dsel = dsel_buf.get();
  const T* dp = dp_buf.get();
  const T* pr = cache.probs.get();
  const T* lse = cache.lse.get();
  const int* ti = cache.topk_idx.get();
  D::launch(n, [=] HT_HD(long i) {
    T* dli = dl + i * e;
    T* ds = dsel + i * k;
    math::softmax_row_backward(ds, tw + i * k, dw + i * k, k);
    for (int j = 0; j < k; ++j) dli[ti[i * k + j]] += ds[j];
    math::softmax_row_backward(dli, pr + i * e, dp, e);
    const T zl = T(2) * z_coef * lse[i];
    for (int ex = 0; ex < e; ++ex) dli[ex] += zl * pr[i * e + ex];
  });
  D::gemm(dx, dl, w.router, n, c, e, false, false, true);
  D::gemm(grads.router, dl, x, e, c, n, true, false, true);
}

template <class D, class T>
void moe_backward(const ModelConfig& cfg, const MoeW<T>& w, MoeCacheD<D, T>& cache, const T* x, const T* dy, T* dx,
                  const MoeGrad<T>& grads, int c, T loss_scale) {
  moe_combine_backward<D, T>(w, x, dy, dx, grads, c, cache);
  moe_experts_backward<D, T>(w, grads, c, cache);
  moe_route_permute_backward<D, T>(cfg, w, x, dx, grads, c, loss_scale, cache);
}

}  // namespace ht::engine::dev
