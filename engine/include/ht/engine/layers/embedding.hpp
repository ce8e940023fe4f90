// Token embedding (input side) and the output layer (logits), the two ends of the trunk; MTP
// depths reuse both. tokens is (B, T) of ids in [0, V); wte is (V, C); out is (B, T, C).
// Output layer: h (B, T, C), weight (V, C) -> logits (B, T, V) = h weight^T (no bias, untied).
#pragma once

#include "ht/engine/tensor.hpp"

namespace ht::engine {

// Throws std::out_of_range naming the token when an id is outside [0, V).
template <class T>
void embedding_forward(Tensor<T>& out, const Tensor<int>& tokens, const Tensor<T>& wte);
// dwte[tokens[b,t]] += dout[b,t]; rows are visited in token order (fixed accumulation order).
template <class T>
void embedding_backward(Tensor<T>& dwte, const Tensor<T>& dout, const Tensor<int>& tokens);

template <class T>
void output_forward(Tensor<T>& logits, const Tensor<T>& h, const Tensor<T>& weight);
// dh and dweight accumulate.
template <class T>
void output_backward(Tensor<T>& dh, Tensor<T>& dweight, const Tensor<T>& dlogits,
                     const Tensor<T>& h, const Tensor<T>& weight);

}  // namespace ht::engine
