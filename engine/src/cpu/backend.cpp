// The CPU reference implementation of the Backend interface: each operation forwards to the
// same functions the layers call (cpu::matmul, math.hpp, cpu/ops.hpp).
#include "ht/engine/backend.hpp"

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/cpu/ops.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  void matmul(float* out, const float* a, const float* b, int m, int n, int k, bool trans_a,
              bool trans_b, bool accumulate) override {
    cpu::matmul(out, a, b, m, n, k, trans_a, trans_b, accumulate);
  }
  void silu(float* y, const float* x, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) y[i] = math::silu(x[i]);
  }
  void add(float* y, const float* x, const float* z, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] + z[i];
  }
  double sum(const float* x, std::size_t n) override {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += x[i];
    return s;
  }
  void softmax_rows(float* out, const float* in, int rows, int n) override {
    for (int r = 0; r < rows; ++r)
      math::softmax_row(out + static_cast<std::ptrdiff_t>(r) * n, in + static_cast<std::ptrdiff_t>(r) * n, n);
  }
  void cumsum_rows(float* out, const float* in, int rows, int n) override {
    for (int r = 0; r < rows; ++r)
      cpu::cumsum_row(out + static_cast<std::ptrdiff_t>(r) * n, in + static_cast<std::ptrdiff_t>(r) * n, n);
  }
  void gather_rows(float* out, const float* in, const int* index, int rows, int c) override {
    cpu::gather_rows(out, in, index, rows, c);
  }
  void scatter_add_rows(float* out, const float* in, const int* index, int rows, int c) override {
    cpu::scatter_add_rows(out, in, index, rows, c);
  }
  void topk_rows(int* idx, const float* in, int rows, int n, int k) override {
    for (int r = 0; r < rows; ++r)
      cpu::topk_row(idx + static_cast<std::ptrdiff_t>(r) * k, in + static_cast<std::ptrdiff_t>(r) * n, n, k);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ht::engine
