// The CPU backend's primitives against their definitions: top-k order and tie-break, ordered
// scatter-add, gather, prefix sums, softmax rows, and GEMM through the interface.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ht/engine/backend.hpp"
#include "ht/engine/rng.hpp"

using namespace ht::engine;

TEST_CASE("top-k returns the k largest in descending order, ties to the lower index", "[engine][backend][property]") {
  auto be = make_cpu_backend();
  rc::prop("topk vs stable sort", [&] {
    const int n = *rc::gen::inRange(1, 12);
    const int k = *rc::gen::inRange(1, n + 1);
    // Few distinct values so ties are common.
    const auto vals = *rc::gen::container<std::vector<int>>(static_cast<size_t>(n), rc::gen::inRange(-2, 3));
    std::vector<float> in(vals.begin(), vals.end());
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return in[static_cast<size_t>(a)] > in[static_cast<size_t>(b)]; });
    std::vector<int> idx(static_cast<size_t>(k));
    be->topk_rows(idx.data(), in.data(), 1, n, k);
    RC_ASSERT(idx == std::vector<int>(order.begin(), order.begin() + k));
  });
}

TEST_CASE("gather, scatter-add, cumsum and softmax rows follow their definitions", "[engine][backend]") {
  auto be = make_cpu_backend();
  const std::vector<float> in{1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const std::vector<int> index{2, 0, 2};
  std::vector<float> g(6);
  be->gather_rows(g.data(), in.data(), index.data(), 3, 2);
  CHECK(g == std::vector<float>{5, 6, 1, 2, 5, 6});
  std::vector<float> s(6, 0.f);
  be->scatter_add_rows(s.data(), in.data(), index.data(), 3, 2);
  CHECK(s == std::vector<float>{3, 4, 0, 0, 1 + 5, 2 + 6});
  std::vector<float> c(6);
  be->cumsum_rows(c.data(), in.data(), 2, 3);
  CHECK(c == std::vector<float>{1, 3, 6, 4, 9, 15});
  std::vector<float> p(6);
  be->softmax_rows(p.data(), in.data(), 2, 3);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(p[0] == Approx(std::exp(1.0) / z).epsilon(1e-6));
  CHECK(p[5] == Approx(std::exp(3.0) / z).epsilon(1e-6));  // shift invariance: row 2 = row 1 + 3
  CHECK(be->sum(in.data(), in.size()) == 21.0);
  std::vector<float> out(4);
  const std::vector<float> a{1, 2, 3, 4}, b{5, 6, 7, 8};
  be->matmul(out.data(), a.data(), b.data(), 2, 2, 2, false, true, false);
  CHECK(out == std::vector<float>{1 * 5 + 2 * 6, 1 * 7 + 2 * 8, 3 * 5 + 4 * 6, 3 * 7 + 4 * 8});
  CHECK(be->name() == "cpu");
}
