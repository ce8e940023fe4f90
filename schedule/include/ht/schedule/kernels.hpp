// The kernels of a compute node, described by their forward shapes, for the twin's physical cost
// model (sim/cost_model.hpp), which times each kernel on a GPU from its shape: GEMMs by tiles and
// waves, attention at flash-attention efficiency, scans and elementwise work by memory traffic.
// The node's phase says which kernels run: the forward ones (forward, recompute), their data- and
// weight-gradient GEMMs (backward; the weight-gradient GEMMs of delayable kernels move to the W
// node under delayed wgrad), or only those weight-gradient GEMMs (weight).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ht::schedule {

enum class KernelKind : std::uint8_t {
  Gemm,         // (m x k) * (k x n); backward: dgrad (m x n)(n x k) and wgrad (k x m)(m x n)
  GroupedGemm,  // `groups` GEMMs of m rows each (the routed experts of one rank)
  Attention,    // fused (flash) attention core: scores and values
  Scan,         // recurrences (Mamba2 SSD scan) and causal convolutions
  DeltaRule,    // GDN's chunked gated delta rule (FLA's Triton kernels): m = tokens of one sequence,
                // n = independent chains (sequences x value heads on the rank)
  Elementwise,  // norms, activations, softmax, residual adds: memory bound, streaming
  Permute,      // MoE token permutations (gathers and scatters of rows): memory bound, indexed;
                // the backward is the mirror permutation, as much traffic as the forward
  HostCopy,     // activation offloading: `bytes` to host memory after the forward (D2H), back
                // before the backward (H2D), on the copy engines beside the SMs' kernels
};

struct Kernel {
  KernelKind kind = KernelKind::Elementwise;
  bool delayable = true;  // GEMM whose weight gradient a delayed W node computes
  double m = 0, n = 0, k = 0;  // GEMM shape (forward)
  double groups = 1;           // GroupedGemm: GEMMs in the group
  double flops = 0;            // forward floating-point operations
  double bytes = 0;            // forward HBM traffic
  bool fp8 = false;            // GEMM in FP8 (Transformer Engine's linear layers under --precision fp8)
  bool operator==(const Kernel&) const = default;
};

struct Work {
  std::vector<Kernel> kernels;
  bool operator==(const Work&) const = default;
};

std::string_view to_string(KernelKind k);
std::optional<KernelKind> kernel_kind_from_string(std::string_view s);

}  // namespace ht::schedule
