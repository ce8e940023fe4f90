// Per-GPU memory of a training step (megatron-parallel.md 4.6 and 8): the rank's weights (bf16),
// fp32 main gradients and optimizer state (fp32 master weights and two Adam moments, sharded over
// the data-parallel replicas by the distributed optimizer: dense over dp x cp, experts over edp),
// plus the activations its schedule keeps alive at its peak. Activations are counted per layer
// type per microbatch (section 8.2, elements per token the rank owns under sequence
// parallelism), added when a layer's first forward node is issued and freed after its last
// backward node, walking the rank's own issue order; so the warm-up depth of 1F1B, interleaving
// and combined 1F1B's extra microbatch come from the actual plan. Recomputation keeps less
// (full: the layer input; selective modules: section 6.2) and re-materialises a layer's working
// set only while its backward runs. Offloaded activations (offloaded_elements) leave the GPU after
// the forward; a layer's backward holds its own and the next layer's, reloaded one layer ahead. What the process holds beside its tensors (CUDA context,
// NCCL and dispatcher buffers) is runtime_overhead's; allocator fragmentation and temporary
// workspaces are not counted.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::schedule {

struct MemoryBreakdown {
  int rank = 0;                       // the rank with the largest peak
  double weights = 0;                 // bytes
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;             // at the peak
  int microbatches_in_flight = 0;     // microbatches holding activations at the peak
  double parameters = 0;              // elements the rank holds
  double total() const { return weights + gradients + optimizer + activations; }
};

// Elements per owned token of one layer symbol's saved activations that fine-grained activation
// offloading (config.offload) moves to host memory, split by the slot whose nodes copy them:
// pre_dispatch (the attention's norm, QKV input, Q/K/V and output; an 'E' terminal's pre-MLP norm)
// and mlp (a dense '-' layer's pre-MLP norm; the routed experts' fc1 and activation inputs). Mamba
// and GDN mixers have no offload groups in Megatron. Never more than the symbol keeps.
struct OffloadSplit {
  double pre = 0, mlp = 0;
  double total() const { return pre + mlp; }
};
OffloadSplit offloaded_elements(char symbol, const ModelDims& dims, const ParallelConfig& config);

// Activation bytes one rank keeps for one logical layer (its symbols) for one microbatch, with
// the recomputation settings; `working` gets what the layer holds while its backward runs.
double layer_activation_bytes(const std::string& symbols, bool mtp, const ModelDims& dims,
                              const ParallelConfig& config, double* working = nullptr);

// The fewest microbatches per step whose plan reaches the same activation peak as any larger
// count (and the same per-microbatch nodes): the warm-up depth of pipeline rank 0 plus two
// steady steps, in whole groups of pp (interleaving advances microbatches pp at a time); 4 without a
// pipeline. `layout search` checks memory and bounds the step on plans of this size.
int saturated_microbatches(const ParallelConfig& config, bool overlap);

// The largest weights + gradients + optimizer state of any pipeline rank (peak_memory's, without
// activations): a layout whose state alone exceeds the HBM cannot fit, and this needs no plan.
double state_memory(const patterns::ParsedPattern& pattern, const ModelDims& dims, const ParallelConfig& config,
                    Precision precision = Precision::Bf16);

// What an implementation holds, for the walk below: bytes per parameter of its weights, gradients
// and optimizer state (the optimizer's sharded by the distributed optimizer), and what it keeps per
// microbatch for a layer's backward (`layer`: kept between forward and backward, `working` while
// the backward runs), for the loss of one prediction head and for the embedding. Megatron's
// (megatron_memory) is the twin's; the engine passes its CPU layers' (engine/memory_estimate.hpp).
struct MemoryModel {
  double weight_bytes = 2, gradient_bytes = 4, optimizer_bytes = 12;
  std::function<double(const std::string& symbols, bool mtp, const ParallelConfig& config, double* working)> layer;
  std::function<double(const ParallelConfig&config)> output, embedding;
};
// Megatron's: bf16 weights (under FP8 Transformer Engine keeps an FP8 copy beside them, physics.md
// 6: one byte more), fp32 main gradients, fp32 master weights and two Adam moments; activations
// as layer_activation_bytes, the loss's fp32 softmax, the token ids.
MemoryModel megatron_memory(const ModelDims& dims, Precision precision = Precision::Bf16);

MemoryBreakdown peak_memory(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                            const ParallelConfig& config, const Plan& plan, Precision precision = Precision::Bf16);

// Every plan rank's own peak (MemoryBreakdown::rank is the layout's rank), under `model`;
// peak_memory is the largest of these under megatron_memory.
std::vector<MemoryBreakdown> rank_memory(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                                         const ParallelConfig& config, const Plan& plan, const MemoryModel& model);

// What a Megatron training process holds on each GPU beside its tensors (docs/twin.md "Memory a
// planner can trust"), every figure from a public measurement or the library's own sizing code:
// the CUDA context, one set of NCCL buffers per communicator the step runs collectives or
// sends on, and the DeepEP buffer a flex dispatcher allocates. The same for every rank of a
// layout (the largest of its groups' figures).
struct RuntimeOverhead {
  double cuda_context = 0;  // bytes
  double nccl = 0;          // bytes, every communicator counted
  int communicators = 0;    // NCCL communicators counted
  double dispatcher = 0;    // bytes: DeepEP's NVLink and RDMA buffers (0 for NCCL dispatchers)
  double total() const { return cuda_context + nccl + dispatcher; }
};
RuntimeOverhead runtime_overhead(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                                 const ParallelConfig& config, Dispatcher dispatcher);

}  // namespace ht::schedule
