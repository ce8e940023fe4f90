// CPU reference softmax cross-entropy (see cross_entropy.hpp for shapes).
#include "ht/engine/layers/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "ht/engine/math.hpp"

namespace ht::engine {

template <class T>
T cross_entropy_forward(CrossEntropyCache<T>& cache, const Tensor<T>& logits,
                        const Tensor<int>& targets, const Tensor<T>& weights) {
  const int v = logits.dim(-1);
  const int n = static_cast<int>(targets.size());
  if (logits.size() != static_cast<std::size_t>(n) * v || weights.size() != targets.size())
    throw std::invalid_argument("cross_entropy: logits, targets and weights disagree in size");
  cache.lse = Tensor<T>({n});
  T total = T(0);
  for (int i = 0; i < n; ++i) {
    const T* row = logits.ptr() + static_cast<long>(i) * v;
    const int t = targets[i];
    if (t < 0 || t >= v)
      throw std::out_of_range("target id " + std::to_string(t) + " outside [0, " +
                              std::to_string(v) + ")");
    const T lse = math::logsumexp_row(row, v);
    cache.lse[i] = lse;
    if (weights[i] != T(0)) total += weights[i] * (lse - row[t]);
  }
  return total;
}

template <class T>
void cross_entropy_backward(Tensor<T>& dlogits, const Tensor<T>& logits,
                            const Tensor<int>& targets, const Tensor<T>& weights,
                            const CrossEntropyCache<T>& cache, T dloss) {
  const int v = logits.dim(-1);
  const int n = static_cast<int>(targets.size());
  for (int i = 0; i < n; ++i) {
    const T w = dloss * weights[i];
    if (w == T(0)) continue;
    const T* row = logits.ptr() + static_cast<long>(i) * v;
    T* d = dlogits.ptr() + static_cast<long>(i) * v;
    // forward: ce = lse - z_t, so dce/dz_j = softmax_j - [j == t]
    for (int j = 0; j < v; ++j) d[j] += w * std::exp(row[j] - cache.lse[i]);
    d[targets[i]] -= w;
  }
}

#define HT_INSTANTIATE(T)                                                                     \
  template T cross_entropy_forward<T>(CrossEntropyCache<T>&, const Tensor<T>&,               \
                                      const Tensor<int>&, const Tensor<T>&);                 \
  template void cross_entropy_backward<T>(Tensor<T>&, const Tensor<T>&, const Tensor<int>&,  \
                                          const Tensor<T>&, const CrossEntropyCache<T>&, T);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
