// CUDA layers, part 1: RMSNorm, embedding, output projection, softmax cross-entropy, written over
// a device policy D (dev/host.hpp). Shapes and formulas are the CPU reference's
// (layers/rmsnorm.hpp, embedding.hpp, cross_entropy.hpp). Where the CPU sums over rows (a weight
// gradient, an embedding row), one thread owns one output column and adds the rows in increasing
// order: the CPU's order, so those sums agree bit for bit with the same inputs, without atomics.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

// y += x over n values (a residual add, a merged gradient).
template <class D, class T>
void add_inplace(T* y, const T* x, long n) {
  D::launch(n, [=] HT_HD(long i) { y[i] += x[i]; });
}

// Rows of two (n, c) halves side by side, (n, 2c), and back: MTP's cat(enorm(emb), hnorm(h)),
// the first half first, as Megatron concatenates.
// One thread per element of the (n, 2c) side, so neighbouring threads touch neighbouring memory.
template <class D, class T>
void concat_rows(T* out, const T* first, const T* second, int n, int c) {
  D::launch(2L * n * c, [=] HT_HD(long i) {
    const long r = i / (2 * c), j = i % (2 * c);
    out[i] = j < c ? first[r * c + j] : second[r * c + j - c];
  });
}
template <class D, class T>
void split_rows(T* first, T* second, const T* in, int n, int c) {
  D::launch(2L * n * c, [=] HT_HD(long i) {
    const long r = i / (2 * c), j = i % (2 * c);
    (j < c ? first[r * c + j] : second[r * c + j - c]) = in[i];
  });
}

// out, x (n, c); w (c); rstd (n) is written for the backward.
template <class D, class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int n, int c, T eps) {
  D::launch(n, [=] HT_HD(long i) {
    const T* xi = x + i * c;
    T* yi = out + i * c;
    const T r = math::rms_rstd(xi, c, eps);
    rstd[i] = r;
    for (int j = 0; j < c; ++j) yi[j] = xi[j] * r * w[j];
  });
}

// dx and dw accumulate (+=).
template <class D, class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int n, int c) {
  D::launch(n, [=] HT_HD(long i) {
    const T* xi = x + i * c;
    const T* dyi = dy + i * c;
    T* dxi = dx + i * c;
    const T r = rstd[i];
    // forward: y_j = x_j r w_j, r = (mean(x^2) + eps)^-1/2
    T dot = T(0);
    for (int j = 0; j < c; ++j) dot += dyi[j] * w[j] * xi[j];
    const T coef = r * r * r * dot / T(c);
    for (int j = 0; j < c; ++j) dxi[j] += r * w[j] * dyi[j] - coef * xi[j];
  });
  D::launch(c, [=] HT_HD(long j) {
    T acc = dw[j];
    for (long i = 0; i < n; ++i) acc += dy[i * c + j] * x[i * c + j] * rstd[i];
    dw[j] = acc;
  });
}

// Token ids come from the host; they are checked there, before anything reaches the device.
inline void check_tokens(const std::vector<int>& tokens, int vocab) {
  for (const int id : tokens)
    if (id < 0 || id >= vocab)
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab) + ")");
}

// out (n, c) = wte[tokens]; tokens (n) device ids already checked.
template <class D, class T>
void embedding_forward(T* out, const int* tokens, const T* wte, int n, int c) {
  D::launch(n, [=] HT_HD(long i) {
    const T* src = wte + static_cast<long>(tokens[i]) * c;
    T* dst = out + i * c;
    for (int j = 0; j < c; ++j) dst[j] = src[j];
  });
}

// dwte[tokens[i]] += dout[i], i increasing (one thread per channel).
template <class D, class T>
void embedding_backward(T* dwte, const T* dout, const int* tokens, int n, int c) {
  D::launch(c, [=] HT_HD(long j) {
    for (long i = 0; i < n; ++i) dwte[static_cast<long>(tokens[i]) * c + j] += dout[i * c + j];
  });
}

// logits (n, v) = h (n, c) weight^T with weight (v, c).
template <class D, class T>
void output_forward(T* logits, const T* h, const T* weight, int n, int c, int v) {
  D::gemm(logits, h, weight, n, v, c, false, true, false);
}
// dh and dweight accumulate.
template <class D, class T>
void output_backward(T* dh, T* dweight, const T* dlogits, const T* h, const T* weight, int n, int c, int v) {
  D::gemm(dh, dlogits, weight, n, c, v, false, false, true);
  D::gemm(dweight, dlogits, h, v, c, n, true, false, true);
}

// Weighted CE over n rows of v logits: returns sum_i w_i (lse_i - z_{i,t_i}); lse (n) is kept for
// the backward. targets checked on the host like tokens. The per-row terms are formed on the
// device and summed on the host in row order (the CPU's order).
template <class D, class T>
T cross_entropy_forward(T* lse, const T* logits, const int* targets, const T* weights, int n, int v) {
  Buf<D, T> term(static_cast<std::size_t>(n));
  T* tp = term.get();
  D::launch(n, [=] HT_HD(long i) {
    const T* row = logits + i * v;
    const T l = math::logsumexp_row(row, v);
    lse[i] = l;
    tp[i] = weights[i] != T(0) ? weights[i] * (l - row[targets[i]]) : T(0);
  });
  std::vector<T> host(static_cast<std::size_t>(n));
  D::download(host.data(), tp, host.size());
  T total = T(0);
  for (const T t : host) total += t;  // + 0 for unweighted rows leaves the sum unchanged
  return total;
}

// dlogits (n, v) accumulates dloss * w_i (softmax - onehot).
template <class D, class T>
void cross_entropy_backward(T* dlogits, const T* logits, const int* targets, const T* weights, const T* lse,
                            int n, int v, T dloss) {
  D::launch(n, [=] HT_HD(long i) {
    const T w = dloss * weights[i];
    if (w == T(0)) return;
    const T* row = logits + i * v;
    T* d = dlogits + i * v;
    for (int j = 0; j < v; ++j) d[j] += w * std::exp(row[j] - lse[i]);
    d[targets[i]] -= w;
  });
}

}  // namespace ht::engine::dev
