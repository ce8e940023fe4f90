// Eigen-backed GEMM of the CPU reference backend (see gemm.hpp for the layout convention).
// Eigen runs single-threaded here (no OpenMP in this build), and its blocking depends only on the
// shapes, so the same shapes give the same bits on every run: the determinism the engine relies on.
// With HT_EIGEN_BLAS (engine/CMakeLists.txt) Eigen hands its GEMMs to OpenBLAS (EIGEN_USE_BLAS);
// OpenBLAS is then pinned to one thread, so each call runs in its caller's thread with a blocking
// that depends only on the shapes, the same guarantee.
#include "ht/engine/cpu/gemm.hpp"

#include <string>

#include <Eigen/Core>

#ifdef HT_OPENBLAS
extern "C" {
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}
#endif

namespace ht::engine::cpu {

std::string gemm_kernels() {
#ifdef HT_OPENBLAS
  return std::string("Eigen ") + std::to_string(EIGEN_WORLD_VERSION) + "." +
         std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
         " + EIGEN_USE_BLAS -> " + openblas_get_config() + " (core " + openblas_get_corename() +
         "), 1 thread per calling thread";
#else
  return std::string("Eigen ") + std::to_string(EIGEN_WORLD_VERSION) + "." +
         std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) +
         " own GEMM kernels, single-threaded";
#endif
}

namespace {
// Once per process, before the first GEMM: OpenBLAS's own thread pool would split the work by
// the pool's size (and contend with the executor's rank threads).
void pin_blas_threads() {
#ifdef HT_OPENBLAS
  static const bool pinned = (openblas_set_num_threads(1), true);
  (void)pinned;
#endif
}
thread_local double flops_run = 0;
template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using CMap = Eigen::Map<const RowMat<T>>;
template <class T>
using MMap = Eigen::Map<RowMat<T>>;
}  // namespace

template <class T>
void matmul(T* out, const T* a, const T* b, int m, int n, int k, bool trans_a, bool trans_b,
            bool accumulate) {
  if (m == 0 || n == 0) return;
  flops_run += 2.0 * m * n * k;
  pin_blas_threads();
  MMap<T> c(out, m, n);
  if (k == 0) {
    if (!accumulate) c.setZero();
    return;
  }
  // Stored shapes; a transposed operand is a transposed view (no copy).
  CMap<T> am(a, trans_a ? k : m, trans_a ? m : k);
  CMap<T> bm(b, trans_b ? n : k, trans_b ? k : n);
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (accumulate)
      c.noalias() += lhs * rhs;
    else
      c.noalias() = lhs * rhs;
  };
  if (!trans_a && !trans_b) run(am, bm);
  else if (!trans_a && trans_b) run(am, bm.transpose());
  else if (trans_a && !trans_b) run(am.transpose(), bm);
  else run(am.transpose(), bm.transpose());
}

template <class T>
void linear_forward(T* y, const T* x, const T* weight, const T* bias, int n, int c, int oc) {
  matmul(y, x, weight, n, oc, c, false, true, false);
  if (bias)
    for (int i = 0; i < n; ++i)
      for (int o = 0; o < oc; ++o) y[static_cast<long>(i) * oc + o] += bias[o];
}

double gemm_flops() { return flops_run; }

template <class T>
void linear_backward(T* dx, T* dweight, T* dbias, const T* dy, const T* x, const T* weight, int n,
                     int c, int oc, WgradSink<T>* defer_weight) {
  if (dx) matmul(dx, dy, weight, n, c, oc, false, false, true);
  if (dweight && defer_weight) defer_weight->linear(dweight, dy, x, n, c, oc);
  else if (dweight) matmul(dweight, dy, x, oc, c, n, true, false, true);
  if (dbias)
    // Row-by-row sum in token order: fixed reduction order.
    for (int i = 0; i < n; ++i)
      for (int o = 0; o < oc; ++o) dbias[o] += dy[static_cast<long>(i) * oc + o];
}

#define HT_INSTANTIATE(T)                                                                   \
  template void matmul<T>(T*, const T*, const T*, int, int, int, bool, bool, bool);         \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);         \
  template void linear_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, WgradSink<T>*);
HT_INSTANTIATE(float)
HT_INSTANTIATE(double)
#undef HT_INSTANTIATE

}  // namespace ht::engine::cpu
