// Row primitives of the CPU reference backend that are not GEMMs: top-k with the router's
// tie-break, gather and ordered scatter-add of rows, prefix sums. Templated so the float64
// finite-difference path runs the same code; the MoE layer uses them for routing and permutation.
#pragma once

#include <cstddef>

#include "ht/engine/math.hpp"  // HT_HD: the CUDA backend runs these same functions in its kernels

namespace ht::engine::cpu {

// Indices of the k largest of in[0..n), descending; on equal values the lower index comes first.
// Selection by k scans with a strict '>' so the result is the same on every platform.
template <class T>
HT_HD void topk_row(int* idx, const T* in, int n, int k) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int q = 0; q < j; ++q) taken = taken || idx[q] == e;
      if (!taken && (best < 0 || in[e] > in[best])) best = e;
    }
    idx[j] = best;
  }
}

template <class T>
HT_HD void gather_rows(T* out, const T* in, const int* index, int rows, int c) {
  for (int i = 0; i < rows; ++i)
    for (int d = 0; d < c; ++d)
      out[static_cast<std::ptrdiff_t>(i) * c + d] = in[static_cast<std::ptrdiff_t>(index[i]) * c + d];
}

// out[index[i]] += in[i], i increasing: the accumulation order is fixed by the index order.
template <class T>
HT_HD void scatter_add_rows(T* out, const T* in, const int* index, int rows, int c) {
  for (int i = 0; i < rows; ++i)
    for (int d = 0; d < c; ++d)
      out[static_cast<std::ptrdiff_t>(index[i]) * c + d] += in[static_cast<std::ptrdiff_t>(i) * c + d];
}

template <class T>
HT_HD void cumsum_row(T* out, const T* in, int n) {
  T s = T(0);
  for (int i = 0; i < n; ++i) out[i] = s += in[i];
}

}  // namespace ht::engine::cpu
