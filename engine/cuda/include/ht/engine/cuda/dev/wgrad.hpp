// The device layers' weight-gradient GEMM of a linear map y = x W^T (layers/wgrad.hpp): run now on
// the device policy D, or handed to the sink that runs it in the slot's W node (delayed wgrad,
// exec/weight_steps.hpp) -- the same call with the same operands either way.
#pragma once

#include "ht/engine/layers/wgrad.hpp"

namespace ht::engine::dev {

// dweight (oc, c) += dy (n, oc)^T x (n, c).
template <class D, class T>
void weight_gemm(T* dweight, const T* dy, const T* x, int n, int c, int oc, WgradSink<T>* wgrad) {
  if (wgrad) wgrad->linear(dweight, dy, x, n, c, oc);
  else D::gemm(dweight, dy, x, oc, c, n, true, false, true);
}

}  // namespace ht::engine::dev
