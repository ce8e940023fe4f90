// Row primitives that are not GEMMs: top-k with the router's tie-break, and a gather of rows.
// Templated so the float64 finite-difference path runs the same code; the MoE layer (CPU and
// device) uses them for routing and permutation.
#pragma once

#include <cstddef>

#include "ht/engine/math.hpp"  // HT_HD: the device layers run these same functions in their kernels

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

}  // namespace ht::engine::cpu
