// RMSNorm, the pre-norm of every residual block and the final/MTP norms.
// inp is (N, C) (any leading dims flattened into N), weight is (C), out is (N, C),
// cache.rstd is (N): out = inp * rstd * weight with rstd = 1/sqrt(mean(inp^2) + eps).
#pragma once

#include "ht/engine/tensor.hpp"

namespace ht::engine {

template <class T>
struct RMSNormCache {
  Tensor<T> rstd;  // (N)
};

// out is resized to inp's shape and overwritten.
template <class T>
void rmsnorm_forward(Tensor<T>& out, RMSNormCache<T>& cache, const Tensor<T>& inp,
                     const Tensor<T>& weight, T eps);
// dinp and dweight accumulate (+=).
template <class T>
void rmsnorm_backward(Tensor<T>& dinp, Tensor<T>& dweight, const Tensor<T>& dout,
                      const Tensor<T>& inp, const Tensor<T>& weight, const RMSNormCache<T>& cache);

}  // namespace ht::engine
