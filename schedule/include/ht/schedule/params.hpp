// Parameter counts of a model and of one rank's share of it (megatron-parallel.md 8.1): what
// `hybrid-twin models` prints, what the memory model stores per rank, and the sizes of the
// gradient reductions. Counts are elements; every layer symbol counts its own weights (an 'E'
// counts its norm, router, shared expert and routed experts).
#pragma once

#include <string>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"

namespace ht::schedule {

// A layer's non-expert weights: the part tensor parallelism splits (projections, the shared
// expert) and the part every TP rank holds whole (norms, the router, MLA down-projections).
struct ParamSplit {
  double tp_split = 0;
  double replicated = 0;
  double total() const { return tp_split + replicated; }
};
ParamSplit layer_param_split(char symbol, const ModelDims& dims);

// One rank's weights of one layer (its symbols; `mtp`: an MTP depth, whose eh_proj and norms
// count too): TP-split part / tp + replicated part (dense; with fewer KV heads than TP ranks
// every rank holds one KV group, megatron-parallel.md 2.3), local experts / etp (expert); and
// the replicated part alone (its gradients are summed over TP, 2.4).
struct RankLayerParams {
  double dense = 0, expert = 0, replicated = 0;
};
RankLayerParams rank_layer_params(const std::string& symbols, bool mtp, const ModelDims& dims,
                                  const ParallelConfig& cfg);

struct ModelParams {
  double total = 0;      // every weight: embedding, output layer (unless tied), layers, MTP depths
  double active = 0;     // weights one token uses: routed experts count top_k of num_experts
  double embedding = 0;  // input embedding
  double output = 0;     // output layer (0 when tied) + final norm
  double experts = 0;    // routed experts of the main layers
  double mtp = 0;        // everything of the MTP depths (eh_proj, norms, inner layers and experts)
  double mtp_active = 0; // the MTP depths' share of `active`
};
ModelParams count_params(const patterns::ParsedPattern& pattern, const ModelDims& dims);

}  // namespace ht::schedule
