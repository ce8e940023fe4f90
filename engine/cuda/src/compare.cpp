// CPU vs CUDA, one row per Backend operation (the `cpu_vs_cuda` rows of `hybrid-twin verify
// --backend cuda`, and the cases of tests/cuda). Same random inputs on both backends; the CPU
// reference's outputs are the yardstick.
//
// Stated bounds (u = 2^-24, the float32 unit roundoff):
//   matmul     cuBLAS sums the k products in another order than Eigen. Each result is within
//              gamma_(k+1) (|c| + sum_p |a_ip| |b_pj|) of the exact value (c: the accumulated
//              input; gamma_n ~ n u), so the two are within twice that of each other:
//              |cpu - cuda| <= 2 (k + 1) u (|c| + sum_p |a_ip| |b_pj|).
//   silu       CUDA's expf is within 2 ulp, glibc's within 1, so exp(-x) differs by <= 3 ulp
//              (6 u relative); 1 + e, the division and the product add <= 1 ulp each:
//              |cpu - cuda| <= 16 u |y|.
//   softmax    each exp differs by <= 6 u relative, the n-term sum (same order) by <= (6 + 2n) u,
//              the reciprocal and the scale by <= 2 u each: |cpu - cuda| <= (2n + 16) u |p|.
//   add, cumsum_rows, gather_rows, scatter_add_rows, topk_rows, sum: no exp, same order, no
//              contraction (--fmad=false), so bitwise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "ht/engine/backend.hpp"
#include "ht/engine/cuda/backend.hpp"
#include "ht/engine/cuda/compare.hpp"
#include "ht/engine/rng.hpp"
#include "entry_points.hpp"

namespace ht::engine::cuda {
namespace {

constexpr double kU = 0x1.0p-24;

std::vector<float> random_floats(Rng& rng, std::size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.uniform(lo, hi));
  return v;
}

std::vector<int> random_indices(Rng& rng, std::size_t n, int range) {
  std::vector<int> v(n);
  for (auto& x : v) x = std::min(range - 1, static_cast<int>(rng.uniform() * range));
  return v;
}

// Compares outputs element by element against a per-element bound (0 = bitwise required).
template <class T, class Bound>
OpComparison judge(std::string op, const std::vector<T>& cpu, const std::vector<T>& gpu, Bound bound, std::string note) {
  OpComparison r;
  r.op = std::move(op);
  r.note = std::move(note);
  r.bitwise = cpu.size() == gpu.size() && std::memcmp(cpu.data(), gpu.data(), cpu.size() * sizeof(T)) == 0;
  bool within = cpu.size() == gpu.size();
  for (std::size_t i = 0; i < std::min(cpu.size(), gpu.size()); ++i) {
    const double d = std::fabs(static_cast<double>(cpu[i]) - static_cast<double>(gpu[i]));
    if (!(d <= bound(i))) within = false;  // also catches NaN
    r.max_abs_diff = std::max(r.max_abs_diff, d);
  }
  r.pass = r.bitwise || within;
  return r;
}

OpComparison judge_bitwise(std::string op, const auto& cpu, const auto& gpu) {
  return judge(std::move(op), cpu, gpu, [](std::size_t) { return 0.0; }, "bitwise required");
}

OpComparison compare_matmul(Backend& cpu, Backend& gpu, Rng& rng, int m, int n, int k, bool ta, bool tb, bool acc) {
  const auto a = random_floats(rng, static_cast<std::size_t>(m) * k, -1, 1);
  const auto b = random_floats(rng, static_cast<std::size_t>(k) * n, -1, 1);
  const auto c0 = acc ? random_floats(rng, static_cast<std::size_t>(m) * n, -1, 1) : std::vector<float>(static_cast<std::size_t>(m) * n, 0.f);
  auto out_cpu = c0;
  cpu.matmul(out_cpu.data(), a.data(), b.data(), m, n, k, ta, tb, acc);
  auto da = to_device(a), db = to_device(b), dc = to_device(c0);
  gpu.matmul(dc.as<float>(), da.as<float>(), db.as<float>(), m, n, k, ta, tb, acc);
  const auto out_gpu = to_host<float>(dc, c0.size());
  // sum_p |op(a)_ip| |op(b)_pj| per output element, in double.
  std::vector<double> mag(c0.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = std::fabs(static_cast<double>(c0[static_cast<std::size_t>(i) * n + j]));
      for (int p = 0; p < k; ++p) {
        const float av = ta ? a[static_cast<std::size_t>(p) * m + i] : a[static_cast<std::size_t>(i) * k + p];
        const float bv = tb ? b[static_cast<std::size_t>(j) * k + p] : b[static_cast<std::size_t>(p) * n + j];
        s += std::fabs(static_cast<double>(av) * bv);
      }
      mag[static_cast<std::size_t>(i) * n + j] = s;
    }
  std::ostringstream name, note;
  name << "matmul_" << (ta ? 't' : 'n') << (tb ? 't' : 'n') << (acc ? "_acc" : "");
  note << "bound 2 (k+1) u (|c| + sum|a||b|), k = " << k << " (" << m << "x" << n << ")";
  return judge(name.str(), out_cpu, out_gpu, [&](std::size_t i) { return 2 * (k + 1) * kU * mag[i]; }, note.str());
}

}  // namespace

namespace gpu {
std::vector<OpComparison> compare_cpu_vs_cuda(std::uint64_t seed, const CompareShape& s) {
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  Rng rng(seed, "cpu_vs_cuda");
  std::vector<OpComparison> rows;
  const std::size_t count = static_cast<std::size_t>(s.rows) * s.cols;

  for (int t = 0; t < 4; ++t)
    rows.push_back(compare_matmul(*cpu, *gpu, rng, s.m, s.n, s.k, (t & 2) != 0, (t & 1) != 0, false));
  rows.push_back(compare_matmul(*cpu, *gpu, rng, s.m, s.n, s.k, true, false, true));  // dW += dy^T x

  {
    const auto x = random_floats(rng, count, -8, 8);
    std::vector<float> y(count);
    cpu->silu(y.data(), x.data(), count);
    auto dx = to_device(x);
    DeviceBuffer dy(count * sizeof(float));
    gpu->silu(dy.as<float>(), dx.as<float>(), count);
    rows.push_back(judge("silu", y, to_host<float>(dy, count),
                         [&](std::size_t i) { return 16 * kU * std::fabs(static_cast<double>(y[i])); },
                         "bound 16 u |y| (CUDA expf vs glibc expf)"));
  }
  {
    const auto x = random_floats(rng, count, -4, 4), z = random_floats(rng, count, -4, 4);
    std::vector<float> y(count);
    cpu->add(y.data(), x.data(), z.data(), count);
    auto dx = to_device(x), dz = to_device(z);
    DeviceBuffer dy(count * sizeof(float));
    gpu->add(dy.as<float>(), dx.as<float>(), dz.as<float>(), count);
    rows.push_back(judge_bitwise("add", y, to_host<float>(dy, count)));
  }
  {
    const auto x = random_floats(rng, count, -4, 4);
    auto dx = to_device(x);
    const std::vector<double> c{cpu->sum(x.data(), count)}, g{gpu->sum(dx.as<float>(), count)};
    rows.push_back(judge_bitwise("sum", c, g));
  }
  {
    const auto x = random_floats(rng, count, -4, 4);
    std::vector<float> y(count);
    cpu->softmax_rows(y.data(), x.data(), s.rows, s.cols);
    auto dx = to_device(x);
    DeviceBuffer dy(count * sizeof(float));
    gpu->softmax_rows(dy.as<float>(), dx.as<float>(), s.rows, s.cols);
    const double rel = (2.0 * s.cols + 16) * kU;
    std::ostringstream note;
    note << "bound (2n + 16) u |p|, n = " << s.cols << " (CUDA expf vs glibc expf)";
    rows.push_back(judge("softmax_rows", y, to_host<float>(dy, count),
                         [&](std::size_t i) { return rel * std::fabs(static_cast<double>(y[i])); }, note.str()));
  }
  {
    const auto x = random_floats(rng, count, -1, 1);
    std::vector<float> y(count);
    cpu->cumsum_rows(y.data(), x.data(), s.rows, s.cols);
    auto dx = to_device(x);
    DeviceBuffer dy(count * sizeof(float));
    gpu->cumsum_rows(dy.as<float>(), dx.as<float>(), s.rows, s.cols);
    rows.push_back(judge_bitwise("cumsum_rows", y, to_host<float>(dy, count)));
  }
  {
    // gather: s.rows output rows picked (with repeats) from s.rows / 2 + 1 source rows.
    const int src_rows = s.rows / 2 + 1;
    const auto in = random_floats(rng, static_cast<std::size_t>(src_rows) * s.cols, -4, 4);
    const auto index = random_indices(rng, static_cast<std::size_t>(s.rows), src_rows);
    std::vector<float> y(count);
    cpu->gather_rows(y.data(), in.data(), index.data(), s.rows, s.cols);
    auto din = to_device(in);
    auto didx = to_device(index);
    DeviceBuffer dy(count * sizeof(float));
    gpu->gather_rows(dy.as<float>(), din.as<float>(), didx.as<int>(), s.rows, s.cols);
    rows.push_back(judge_bitwise("gather_rows", y, to_host<float>(dy, count)));
  }
  {
    // scatter-add of s.rows source rows into s.rows / 4 + 1 destination rows: many collisions, so
    // the fixed accumulation order is what is being compared.
    const int dst_rows = s.rows / 4 + 1;
    const auto in = random_floats(rng, count, -4, 4);
    const auto index = random_indices(rng, static_cast<std::size_t>(s.rows), dst_rows);
    auto out = random_floats(rng, static_cast<std::size_t>(dst_rows) * s.cols, -4, 4);
    auto dout = to_device(out);
    auto din = to_device(in);
    auto didx = to_device(index);
    cpu->scatter_add_rows(out.data(), in.data(), index.data(), s.rows, s.cols);
    gpu->scatter_add_rows(dout.as<float>(), din.as<float>(), didx.as<int>(), s.rows, s.cols);
    rows.push_back(judge_bitwise("scatter_add_rows", out, to_host<float>(dout, out.size())));
  }
  {
    // Values on a coarse grid so that ties are common and the lower-index tie-break is exercised.
    auto x = random_floats(rng, count, 0, 1);
    for (auto& v : x) v = std::floor(v * 8.0f) / 8.0f;
    const int k = std::min(s.topk, s.cols);
    const std::size_t out_count = static_cast<std::size_t>(s.rows) * k;
    std::vector<int> idx(out_count);
    cpu->topk_rows(idx.data(), x.data(), s.rows, s.cols, k);
    auto dx = to_device(x);
    DeviceBuffer didx(out_count * sizeof(int));
    gpu->topk_rows(didx.as<int>(), dx.as<float>(), s.rows, s.cols, k);
    rows.push_back(judge_bitwise("topk_rows", idx, to_host<int>(didx, out_count)));
  }
  return rows;
}

}  // namespace gpu
}  // namespace ht::engine::cuda
