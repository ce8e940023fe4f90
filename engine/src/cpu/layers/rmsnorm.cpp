// CPU reference RMSNorm (see rmsnorm.hpp for shapes).
#include "ht/engine/layers/rmsnorm.hpp"

#include "ht/engine/math.hpp"

namespace ht::engine {

template <class T>
void rmsnorm_forward(Tensor<T>& out, RMSNormCache<T>& cache, const Tensor<T>& inp,
                     const Tensor<T>& weight, T eps) {
  const int c = weight.dim(0);
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(c));
  if (out.shape != inp.shape) out = Tensor<T>(inp.shape);
  cache.rstd = Tensor<T>({n});
  for (int i = 0; i < n; ++i) {
    const T* x = inp.ptr() + static_cast<long>(i) * c;
    T* y = out.ptr() + static_cast<long>(i) * c;
    const T r = math::rms_rstd(x, c, eps);
    cache.rstd[i] = r;
    for (int j = 0; j < c; ++j) y[j] = x[j] * r * weight[j];
  }
}

template <class T>
void rmsnorm_backward(Tensor<T>& dinp, Tensor<T>& dweight, const Tensor<T>& dout,
                      const Tensor<T>& inp, const Tensor<T>& weight, const RMSNormCache<T>& cache) {
  const int c = weight.dim(0);
  const int n = static_cast<int>(inp.size() / static_cast<std::size_t>(c));
  for (int i = 0; i < n; ++i) {
    const T* x = inp.ptr() + static_cast<long>(i) * c;
    const T* dy = dout.ptr() + static_cast<long>(i) * c;
    T* dx = dinp.ptr() + static_cast<long>(i) * c;
    const T r = cache.rstd[i];
    // forward: y_j = x_j r w_j with r = (mean(x^2)+eps)^-1/2, so dr/dx_j = -r^3 x_j / C and
    // dx_j = r w_j dy_j - r^3 x_j / C * sum_k dy_k w_k x_k.
    T dot = T(0);
    for (int j = 0; j < c; ++j) dot += dy[j] * weight[j] * x[j];
    const T coef = r * r * r * dot / T(c);
    for (int j = 0; j < c; ++j) {
      dx[j] += r * weight[j] * dy[j] - coef * x[j];
      dweight[j] += dy[j] * x[j] * r;
    }
  }
}

template void rmsnorm_forward<float>(Tensor<float>&, RMSNormCache<float>&, const Tensor<float>&,
                                     const Tensor<float>&, float);
template void rmsnorm_forward<double>(Tensor<double>&, RMSNormCache<double>&,
                                      const Tensor<double>&, const Tensor<double>&, double);
template void rmsnorm_backward<float>(Tensor<float>&, Tensor<float>&, const Tensor<float>&,
                                      const Tensor<float>&, const Tensor<float>&,
                                      const RMSNormCache<float>&);
template void rmsnorm_backward<double>(Tensor<double>&, Tensor<double>&, const Tensor<double>&,
                                       const Tensor<double>&, const Tensor<double>&,
                                       const RMSNormCache<double>&);

}  // namespace ht::engine
