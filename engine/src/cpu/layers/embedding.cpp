// CPU reference embedding and output layer (see embedding.hpp for shapes).
#include "ht/engine/layers/embedding.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "ht/engine/cpu/gemm.hpp"

namespace ht::engine {

template <class T>
void embedding_forward(Tensor<T>& out, const Tensor<int>& tokens, const Tensor<T>& wte) {
  const int v = wte.dim(0), c = wte.dim(1);
  std::vector<int> shape = tokens.shape;
  shape.push_back(c);
  if (out.shape != shape) out = Tensor<T>(shape);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int id = tokens[i];
    if (id < 0 || id >= v)
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(v) + ")");
    std::copy_n(wte.ptr() + static_cast<long>(id) * c, c, out.ptr() + static_cast<long>(i) * c);
  }
}

template <class T>
void embedding_backward(Tensor<T>& dwte, const Tensor<T>& dout, const Tensor<int>& tokens) {
  const int c = dwte.dim(1);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    T* row = dwte.ptr() + static_cast<long>(tokens[i]) * c;
    const T* d = dout.ptr() + static_cast<long>(i) * c;
    for (int j = 0; j < c; ++j) row[j] += d[j];
  }
}

template <class T>
void output_forward(Tensor<T>& logits, const Tensor<T>& h, const Tensor<T>& weight) {
  const int v = weight.dim(0), c = weight.dim(1);
  const int n = static_cast<int>(h.size() / static_cast<std::size_t>(c));
  std::vector<int> shape = h.shape;
  shape.back() = v;
  if (logits.shape != shape) logits = Tensor<T>(shape);
  cpu::linear_forward<T>(logits.ptr(), h.ptr(), weight.ptr(), nullptr, n, c, v);
}

template <class T>
void output_backward(Tensor<T>& dh, Tensor<T>& dweight, const Tensor<T>& dlogits,
                     const Tensor<T>& h, const Tensor<T>& weight) {
  const int v = weight.dim(0), c = weight.dim(1);
  const int n = static_cast<int>(h.size() / static_cast<std::size_t>(c));
  cpu::linear_backward<T>(dh.ptr(), dweight.ptr(), nullptr, dlogits.ptr(), h.ptr(), weight.ptr(),
                          n, c, v);
}

#define HT_INSTANTIATE(T)                                                                     \
  template void embedding_forward<T>(Tensor<T>&, const Tensor<int>&, const Tensor<T>&);      \
  template void embedding_backward<T>(Tensor<T>&, const Tensor<T>&, const Tensor<int>&);     \
  template void output_forward<T>(Tensor<T>&, const Tensor<T>&, const Tensor<T>&);           \
  template void output_backward<T>(Tensor<T>&, Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                   const Tensor<T>&);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine
