// The parallel layout as users state it (megatron-parallel.md 1): GPUs, TP, CP, PP, VPP, EP, ETP,
// micro and global batch. resolve_layout derives DP and the microbatch count and refuses
// combinations that do not divide, naming the rule; check_layout adds the rules that depend on
// the model (heads, groups and FFN sizes divisible by TP, sequence length by 2 CP, ...);
// split_stages places the logical layers on the pipeline stages.
#pragma once

#include <string>
#include <vector>

#include "ht/patterns/pipeline.hpp"
#include "ht/schedule/config.hpp"

namespace ht::schedule {

struct LayoutRequest {
  int gpus = 0;          // 0 = not given: dp as given, else the smallest dp that holds ep x etp
  int dp = 0;            // 0 = not given
  int tp = 1, cp = 1, pp = 1, vpp = 0, ep = 1, etp = 1;
  int microbatches = 0;  // 0 = not given: gbs / (dp x mbs), else 1
  int gbs = 0;           // global batch in sequences; 0 = not given
};

// Fills dp and microbatches of `base` (its other settings are kept) from the request and the
// model's micro batch (dims.micro_batch sequences). Throws ScheduleError(BadConfig).
ParallelConfig resolve_layout(const LayoutRequest& request, const ModelDims& dims, ParallelConfig base = {});

// Rules that need the model and pattern; throws ScheduleError(BadConfig) naming the rule.
void check_layout(const patterns::ParsedPattern& pattern, const ModelDims& dims, const ParallelConfig& config);

// Stages of the pattern on pp x vpp: pipe segments as the pattern library allocates them; a
// pipe-less pattern by the legacy physical split when it divides (vpp unset, nothing counted),
// otherwise Megatron's even split of the logical layers over pp x max(vpp, 1) stages, counting
// the embedding and/or loss as a layer when asked -- or, when neither is asked and the layers
// do not divide, when that makes them divide (recorded in `used`). With first/last stage layer
// counts (split.uneven()), Megatron's uneven split of the logical layers: the first and/or last
// pp rank hold their counts, the middle ranks the rest evenly, each rank's layers split evenly
// over its vpp chunks. Throws BadConfig / PatternError.
std::vector<patterns::StageSlice> split_stages(const patterns::ParsedPattern& pattern, const ParallelConfig& config,
                                               PipelineSplit* used = nullptr);

// "tp 2 x cp 1 x dp 16 x pp 8 (ep 32 x etp 1 x edp 1)": one line for reports.
std::string describe_layout(const ParallelConfig& config);

}  // namespace ht::schedule
