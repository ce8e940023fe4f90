// The MoE's row primitives (cpu/ops.hpp, run by the CPU and the device layers) against their
// definitions: top-k order and tie-break against a stable sort, and the gather of rows.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "ht/engine/cpu/ops.hpp"

using namespace ht::engine;

TEST_CASE("top-k returns the k largest in descending order, ties to the lower index", "[engine][ops][property]") {
  rc::prop("topk vs stable sort", [] {
    const int n = *rc::gen::inRange(1, 12);
    const int k = *rc::gen::inRange(1, n + 1);
    // Few distinct values so ties are common.
    const auto vals = *rc::gen::container<std::vector<int>>(static_cast<size_t>(n), rc::gen::inRange(-2, 3));
    std::vector<float> in(vals.begin(), vals.end());
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return in[static_cast<size_t>(a)] > in[static_cast<size_t>(b)]; });
    std::vector<int> idx(static_cast<size_t>(k));
    cpu::topk_row(idx.data(), in.data(), n, k);
    RC_ASSERT(idx == std::vector<int>(order.begin(), order.begin() + k));
  });
}

TEST_CASE("gather takes the indexed rows", "[engine][ops]") {
  const std::vector<float> in{1, 2, 3, 4, 5, 6};  // 3 rows of 2
  const std::vector<int> index{2, 0, 2};
  std::vector<float> g(6);
  cpu::gather_rows(g.data(), in.data(), index.data(), 3, 2);
  CHECK(g == std::vector<float>{5, 6, 1, 2, 5, 6});
}
