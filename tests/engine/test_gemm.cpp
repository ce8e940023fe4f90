// The CPU GEMM against a naive triple loop (the definition), for every transpose combination,
// with and without accumulation; and the same bits on a second run.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include "fd.hpp"
#include "ht/engine/cpu/gemm.hpp"

using namespace ht::engine;

namespace {
// out(m,n) (+)= op(a) op(b) by definition.
void naive(std::vector<double>& out, const std::vector<double>& a, const std::vector<double>& b,
           int m, int n, int k, bool ta, bool tb, bool acc) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<size_t>(p * m + i)] : a[static_cast<size_t>(i * k + p)];
        const double bv = tb ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * n + j)];
        s += av * bv;
      }
      out[static_cast<size_t>(i * n + j)] = (acc ? out[static_cast<size_t>(i * n + j)] : 0.0) + s;
    }
}
}  // namespace

TEST_CASE("matmul equals the definition for every transpose and accumulate flag", "[engine][gemm][property]") {
  rc::prop("matmul vs naive", [] {
    const int m = *rc::gen::inRange(1, 40);
    const int n = *rc::gen::inRange(1, 40);
    const int k = *rc::gen::inRange(1, 40);
    const bool ta = *rc::gen::arbitrary<bool>(), tb = *rc::gen::arbitrary<bool>();
    const bool acc = *rc::gen::arbitrary<bool>();
    Rng rng(*rc::gen::inRange(0, 1 << 30));
    std::vector<double> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n)),
        c(static_cast<size_t>(m * n));
    for (auto& v : a) v = rng.normal();
    for (auto& v : b) v = rng.normal();
    for (auto& v : c) v = rng.normal();
    auto expect = c;
    naive(expect, a, b, m, n, k, ta, tb, acc);
    cpu::matmul(c.data(), a.data(), b.data(), m, n, k, ta, tb, acc);
    for (size_t i = 0; i < c.size(); ++i) RC_ASSERT(std::abs(c[i] - expect[i]) <= 1e-12 * (1 + std::abs(expect[i])) * k);
  });
}

TEST_CASE("matmul in float32 gives the same bits on a second run", "[engine][gemm]") {
  Rng rng(7);
  const int m = 67, n = 131, k = 259;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (auto& v : a) v = static_cast<float>(rng.normal());
  for (auto& v : b) v = static_cast<float>(rng.normal());
  std::vector<float> c1(static_cast<size_t>(m * n)), c2(c1.size());
  cpu::matmul(c1.data(), a.data(), b.data(), m, n, k, false, false, false);
  cpu::matmul(c2.data(), a.data(), b.data(), m, n, k, false, false, false);
  CHECK(c1 == c2);
}
