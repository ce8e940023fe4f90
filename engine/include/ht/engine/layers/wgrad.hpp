// Where a layer's backward sends the weight-gradient GEMM of each of its linear maps: computed on
// the spot (no sink: the fused backward of HybridModel, the tests and the oracle), or handed to a
// sink that keeps its operands and runs it later -- the W node of delayed wgrad (reference
// sections 3.3 and 3.5, `backward_dw`). Every backward of layers/*.hpp and of the device layers
// (engine/cuda/.../dev/*.hpp) takes one; exec/weight_steps.hpp holds the sink the executors use.
//
// A linear map y (n, oc) = x (n, c) W^T with W (oc, c) has the weight gradient
//   dW (oc, c) += dy^T x,   the call matmul(dW, dy, x, oc, c, n, trans_a, no trans_b, accumulate)
// of cpu/gemm.hpp's convention, on either backend. The backward keeps the input-gradient GEMM
// (dx += dy W) and everything a recurrence needs; the sink takes only this one. A deferred GEMM
// is the same call on copies of the same operands into the same buffer, so it gives the same bits.
#pragma once

namespace ht::engine {

template <class T>
class WgradSink {
 public:
  virtual ~WgradSink() = default;
  // dweight (oc, c) += dy (n, oc)^T x (n, c), later. The sink copies dy and x: the caller's
  // buffers may be scratch that is gone when the GEMM runs. GEMMs run in the order of the calls.
  virtual void linear(T* dweight, const T* dy, const T* x, int n, int c, int oc) = 0;
};

}  // namespace ht::engine
