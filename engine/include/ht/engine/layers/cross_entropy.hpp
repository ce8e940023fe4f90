// Softmax cross-entropy at the end of the main trunk and of every MTP depth.
// logits (N, V), targets (N) ids, weights (N): the scalar loss is sum_i weights_i * ce_i, so the
// caller expresses averaging, loss masks and MTP scaling through weights (0 = masked token).
#pragma once

#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
struct CrossEntropyCache {
  Tensor<T> lse;  // (N) logsumexp of each row, so backward rebuilds softmax without storing it
};

// Returns sum_i weights_i * (lse_i - logits_i[target_i]), summed in row order.
template <class T>
T cross_entropy_forward(CrossEntropyCache<T>& cache, const Tensor<T>& logits,
                        const Tensor<int>& targets, const Tensor<T>& weights);
// dlogits += dloss * weights_i * (softmax(logits_i) - onehot(target_i)).
template <class T>
void cross_entropy_backward(Tensor<T>& dlogits, const Tensor<T>& logits,
                            const Tensor<int>& targets, const Tensor<T>& weights,
                            const CrossEntropyCache<T>& cache, T dloss);

}  // namespace ht::engine
