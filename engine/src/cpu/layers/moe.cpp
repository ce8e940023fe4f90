// CPU reference MoE (see moe.hpp for shapes, routing rule and losses).
#include "ht/engine/layers/moe.hpp"

#include <algorithm>
#include <stdexcept>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/cpu/ops.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine {

template <class T>
void moe_init(MoeParams<T>& p, const ModelConfig& cfg, Rng& rng) {
  if (cfg.num_experts < 1 || cfg.moe_topk < 1 || cfg.moe_topk > cfg.num_experts)
    throw std::invalid_argument("moe: need 1 <= topk (" + std::to_string(cfg.moe_topk) +
                                ") <= num_experts (" + std::to_string(cfg.num_experts) + ")");
  const T std = static_cast<T>(cfg.init_std);
  p.router = Tensor<T>({cfg.num_experts, cfg.hidden});
  for (auto& v : p.router.data) v = static_cast<T>(rng.normal()) * std;
  p.experts.assign(static_cast<std::size_t>(cfg.num_experts), {});
  for (auto& e : p.experts) swiglu_init<T>(e, cfg.hidden, cfg.moe_ffn_hidden, std, rng);
  p.has_shared = cfg.moe_shared_ffn_hidden > 0;
  if (p.has_shared) swiglu_init<T>(p.shared, cfg.hidden, cfg.moe_shared_ffn_hidden, std, rng);
}

template <class T>
void moe_route_permute(const ModelConfig& cfg, const MoeParams<T>& p, const T* x, int n,
                       T loss_scale, MoeRouting<T>& r, std::vector<T>& permuted_in) {
  const int e = p.router.dim(0), c = p.router.dim(1), k = cfg.moe_topk;
  r.n = n;
  r.e = e;
  r.k = k;
  r.logits = Tensor<T>({n, e});
  r.probs = Tensor<T>({n, e});
  r.lse.assign(static_cast<std::size_t>(n), T(0));
  cpu::linear_forward<T>(r.logits.ptr(), x, p.router.ptr(), nullptr, n, c, e);

  r.topk_idx.assign(static_cast<std::size_t>(n) * k, -1);
  r.topk_w.assign(static_cast<std::size_t>(n) * k, T(0));
  r.tokens_per_expert.assign(static_cast<std::size_t>(e), 0);
  std::vector<T> sel(static_cast<std::size_t>(k));
  for (int i = 0; i < n; ++i) {
    const T* lg = r.logits.ptr() + static_cast<long>(i) * e;
    math::softmax_row(r.probs.ptr() + static_cast<long>(i) * e, lg, e);
    r.lse[static_cast<std::size_t>(i)] = math::logsumexp_row(lg, e);
    int* chosen = r.topk_idx.data() + static_cast<long>(i) * k;
    cpu::topk_row(chosen, lg, e, k);  // ties -> lower expert index
    for (int j = 0; j < k; ++j) {
      sel[static_cast<std::size_t>(j)] = lg[chosen[j]];
      ++r.tokens_per_expert[static_cast<std::size_t>(chosen[j])];
    }
    math::softmax_row(r.topk_w.data() + static_cast<long>(i) * k, sel.data(), k);
  }

  // Permutation: expert-major, token order within an expert (a stable counting sort).
  r.expert_offset.assign(static_cast<std::size_t>(e) + 1, 0);
  for (int ex = 0; ex < e; ++ex)
    r.expert_offset[static_cast<std::size_t>(ex) + 1] =
        r.expert_offset[static_cast<std::size_t>(ex)] + r.tokens_per_expert[static_cast<std::size_t>(ex)];
  std::vector<int> fill(r.expert_offset.begin(), r.expert_offset.end() - 1);
  r.perm_row.assign(static_cast<std::size_t>(n) * k, 0);
  r.row_token.assign(static_cast<std::size_t>(n) * k, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const int ex = r.topk_idx[static_cast<std::size_t>(i) * k + j];
      const int row = fill[static_cast<std::size_t>(ex)]++;
      r.perm_row[static_cast<std::size_t>(i) * k + j] = row;
      r.row_token[static_cast<std::size_t>(row)] = i;
    }
  permuted_in.assign(static_cast<std::size_t>(n) * k * c, T(0));
  cpu::gather_rows(permuted_in.data(), x, r.row_token.data(), n * k, c);

  // Losses, summed over experts then tokens in index order.
  T aux = T(0);
  for (int ex = 0; ex < e; ++ex) {
    T col = T(0);
    for (int i = 0; i < n; ++i) col += r.probs[static_cast<std::size_t>(i) * e + ex];
    aux += col * static_cast<T>(r.tokens_per_expert[static_cast<std::size_t>(ex)]);
  }
  const T nn = static_cast<T>(n);
  r.aux_loss = loss_scale * static_cast<T>(e) * static_cast<T>(cfg.moe_aux_loss_coeff) /
               (static_cast<T>(k) * nn * nn) * aux;
  T z = T(0);
  for (int i = 0; i < n; ++i) z += r.lse[static_cast<std::size_t>(i)] * r.lse[static_cast<std::size_t>(i)];
  r.z_loss = loss_scale * static_cast<T>(cfg.moe_z_loss_coeff) * z / nn;
}

template <class T>
void moe_experts_forward(const MoeParams<T>& p, const MoeRouting<T>& r,
                         const std::vector<T>& permuted_in, std::vector<T>& permuted_out,
                         std::vector<SwiGLUCache<T>>& caches) {
  const int c = p.router.dim(1);
  permuted_out.assign(permuted_in.size(), T(0));
  caches.resize(static_cast<std::size_t>(r.e));
  for (int ex = 0; ex < r.e; ++ex) {
    const int lo = r.expert_offset[static_cast<std::size_t>(ex)];
    const int cnt = r.tokens_per_expert[static_cast<std::size_t>(ex)];
    swiglu_forward<T>(permuted_out.data() + static_cast<long>(lo) * c,
                      caches[static_cast<std::size_t>(ex)],
                      permuted_in.data() + static_cast<long>(lo) * c, cnt,
                      p.experts[static_cast<std::size_t>(ex)]);
  }
}

template <class T>
void moe_unpermute_combine(const MoeRouting<T>& r, const std::vector<T>& permuted_out, T* y,
                           int c) {
  for (int i = 0; i < r.n; ++i) {
    T* yi = y + static_cast<long>(i) * c;
    std::fill_n(yi, c, T(0));
    for (int j = 0; j < r.k; ++j) {
      const T w = r.topk_w[static_cast<std::size_t>(i) * r.k + j];
      const T* o = permuted_out.data() +
                   static_cast<long>(r.perm_row[static_cast<std::size_t>(i) * r.k + j]) * c;
      for (int d = 0; d < c; ++d) yi[d] += w * o[d];
    }
  }
}

template <class T>
void moe_combine_backward(const MoeRouting<T>& r, const std::vector<T>& permuted_out,
                          const T* dy, int c, std::vector<T>& dpermuted_out, std::vector<T>& dw) {
  for (int i = 0; i < r.n; ++i) {
    const T* dyi = dy + static_cast<long>(i) * c;
    for (int j = 0; j < r.k; ++j) {
      const std::size_t ij = static_cast<std::size_t>(i) * r.k + j;
      const long row = static_cast<long>(r.perm_row[ij]) * c;
      const T w = r.topk_w[ij];
      T s = T(0);
      for (int d = 0; d < c; ++d) {
        dpermuted_out[static_cast<std::size_t>(row + d)] += w * dyi[d];
        s += dyi[d] * permuted_out[static_cast<std::size_t>(row + d)];
      }
      dw[ij] += s;
    }
  }
}

template <class T>
void moe_experts_backward(const MoeParams<T>& p, const MoeRouting<T>& r,
                          const std::vector<T>& permuted_in,
                          const std::vector<SwiGLUCache<T>>& caches,
                          const std::vector<T>& dpermuted_out, std::vector<T>& dpermuted_in,
                          MoeParams<T>& grads) {
  const int c = p.router.dim(1);
  for (int ex = 0; ex < r.e; ++ex) {
    const long lo = static_cast<long>(r.expert_offset[static_cast<std::size_t>(ex)]) * c;
    swiglu_backward<T>(dpermuted_in.data() + lo, grads.experts[static_cast<std::size_t>(ex)],
                       dpermuted_out.data() + lo, permuted_in.data() + lo,
                       r.tokens_per_expert[static_cast<std::size_t>(ex)],
                       p.experts[static_cast<std::size_t>(ex)], caches[static_cast<std::size_t>(ex)]);
  }
}

template <class T>
void moe_route_permute_backward(const ModelConfig& cfg, const MoeParams<T>& p, const T* x,
                                const MoeRouting<T>& r, T loss_scale,
                                const std::vector<T>& dpermuted_in, const std::vector<T>& dw,
                                T* dx, MoeParams<T>& grads) {
  const int e = r.e, k = r.k, n = r.n, c = p.router.dim(1);
  // forward: permuted_in[perm_row(x, j)] = x, so dx_x += sum_j dpermuted_in[perm_row(x, j)]
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      const T* src = dpermuted_in.data() +
                     static_cast<long>(r.perm_row[static_cast<std::size_t>(i) * k + j]) * c;
      T* d = dx + static_cast<long>(i) * c;
      for (int q = 0; q < c; ++q) d[q] += src[q];
    }
  Tensor<T> dlogits({n, e});
  const T nn = static_cast<T>(n);
  const T aux_coef = loss_scale * static_cast<T>(e) * static_cast<T>(cfg.moe_aux_loss_coeff) /
                     (static_cast<T>(k) * nn * nn);
  const T z_coef = loss_scale * static_cast<T>(cfg.moe_z_loss_coeff) / nn;
  std::vector<T> dsel(static_cast<std::size_t>(k)), dp(static_cast<std::size_t>(e));
  for (int i = 0; i < n; ++i) {
    T* dl = dlogits.ptr() + static_cast<long>(i) * e;
    const T* pr = r.probs.ptr() + static_cast<long>(i) * e;
    // forward: w = softmax(selected logits)
    std::fill(dsel.begin(), dsel.end(), T(0));
    math::softmax_row_backward(dsel.data(), r.topk_w.data() + static_cast<long>(i) * k,
                               dw.data() + static_cast<long>(i) * k, k);
    for (int j = 0; j < k; ++j)
      dl[r.topk_idx[static_cast<std::size_t>(i) * k + j]] += dsel[static_cast<std::size_t>(j)];
    // forward: aux = aux_coef sum_i p_{x,i} tokens_i (tokens_i is a count: no gradient)
    for (int ex = 0; ex < e; ++ex)
      dp[static_cast<std::size_t>(ex)] =
          aux_coef * static_cast<T>(r.tokens_per_expert[static_cast<std::size_t>(ex)]);
    math::softmax_row_backward(dl, pr, dp.data(), e);
    // forward: z = z_coef sum_x lse_x^2, d lse_x / d logit = p
    const T zl = T(2) * z_coef * r.lse[static_cast<std::size_t>(i)];
    for (int ex = 0; ex < e; ++ex) dl[ex] += zl * pr[ex];
  }
  cpu::linear_backward<T>(dx, grads.router.ptr(), nullptr, dlogits.ptr(), x, p.router.ptr(), n,
                          c, e);
}

template <class T>
void moe_forward(const ModelConfig& cfg, const MoeParams<T>& p, const Tensor<T>& inp,
                 Tensor<T>& out, MoeCache<T>& cache, T loss_scale) {
  const int c = inp.dim(-1);
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(c));
  if (out.shape != inp.shape) out = Tensor<T>(inp.shape);
  moe_route_permute<T>(cfg, p, inp.ptr(), n, loss_scale, cache.routing, cache.permuted_in);
  moe_experts_forward<T>(p, cache.routing, cache.permuted_in, cache.permuted_out,
                         cache.expert_caches);
  moe_unpermute_combine<T>(cache.routing, cache.permuted_out, out.ptr(), c);
  if (p.has_shared) {
    std::vector<T> shared(inp.size());
    swiglu_forward<T>(shared.data(), cache.shared_cache, inp.ptr(), n, p.shared);
    for (std::size_t i = 0; i < shared.size(); ++i) out[i] += shared[i];
  }
}

template <class T>
void moe_backward(const ModelConfig& cfg, const MoeParams<T>& p, const MoeCache<T>& cache,
                  const Tensor<T>& inp, const Tensor<T>& dout, Tensor<T>& dinp,
                  MoeParams<T>& grads, T loss_scale) {
  const int c = inp.dim(-1);
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(c));
  const auto& r = cache.routing;
  if (p.has_shared)
    swiglu_backward<T>(dinp.ptr(), grads.shared, dout.ptr(), inp.ptr(), n, p.shared,
                       cache.shared_cache);
  std::vector<T> dperm_out(cache.permuted_out.size(), T(0));
  std::vector<T> dw(static_cast<std::size_t>(n) * r.k, T(0));
  moe_combine_backward<T>(r, cache.permuted_out, dout.ptr(), c, dperm_out, dw);
  std::vector<T> dperm_in(cache.permuted_in.size(), T(0));
  moe_experts_backward<T>(p, r, cache.permuted_in, cache.expert_caches, dperm_out, dperm_in,
                          grads);
  moe_route_permute_backward<T>(cfg, p, inp.ptr(), r, loss_scale, dperm_in, dw, dinp.ptr(),
                                grads);
}

#define HT_INSTANTIATE(T)                                                                      \
  template void moe_init<T>(MoeParams<T>&, const ModelConfig&, Rng&);                         \
  template void moe_route_permute<T>(const ModelConfig&, const MoeParams<T>&, const T*, int,  \
                                     T, MoeRouting<T>&, std::vector<T>&);                     \
  template void moe_experts_forward<T>(const MoeParams<T>&, const MoeRouting<T>&,             \
                                       const std::vector<T>&, std::vector<T>&,                \
                                       std::vector<SwiGLUCache<T>>&);                         \
  template void moe_unpermute_combine<T>(const MoeRouting<T>&, const std::vector<T>&, T*, int); \
  template void moe_combine_backward<T>(const MoeRouting<T>&, const std::vector<T>&,          \
                                        const T*, int, std::vector<T>&, std::vector<T>&);     \
  template void moe_experts_backward<T>(const MoeParams<T>&, const MoeRouting<T>&,            \
                                        const std::vector<T>&,                                \
                                        const std::vector<SwiGLUCache<T>>&,                   \
                                        const std::vector<T>&, std::vector<T>&,               \
                                        MoeParams<T>&);                                       \
  template void moe_route_permute_backward<T>(const ModelConfig&, const MoeParams<T>&,        \
                                              const T*, const MoeRouting<T>&, T,              \
                                              const std::vector<T>&, const std::vector<T>&,   \
                                              T*, MoeParams<T>&);                             \
  template void moe_forward<T>(const ModelConfig&, const MoeParams<T>&, const Tensor<T>&,     \
                               Tensor<T>&, MoeCache<T>&, T);                                  \
  template void moe_backward<T>(const ModelConfig&, const MoeParams<T>&, const MoeCache<T>&,  \
                                const Tensor<T>&, const Tensor<T>&, Tensor<T>&, MoeParams<T>&, \
                                T);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
