// Allocation of a parsed pattern to pipeline stages (reference sections 1.3 and 2.3): pipe
// segments map VPP-major to (pp rank, virtual stage); pipe-less patterns use the legacy split in
// physical units, which may never cut a bracketed group.
#pragma once

#include <optional>
#include <vector>

#include "ht/patterns/pattern.hpp"

namespace ht::patterns {

struct PipelineConfig {
  int pp = 1;                           // pipeline-model-parallel size
  std::optional<int> vpp;               // virtual pipeline size (stages per rank); nullopt = none
  std::optional<int> first_stage_layers;
  std::optional<int> last_stage_layers;
};

struct StageSlice {
  int pp_rank = 0;
  int vp_stage = 0;
  int physical_offset = 0;  // physical layers before this stage
  int logical_offset = 0;   // logical layers (items) before this stage
  std::vector<Item> items;
  int physical_count() const;
};

// The slice for one (pp_rank, vp_stage); vp_stage nullopt = no virtual pipelining.
StageSlice select_stage(const ParsedPattern& parsed, const PipelineConfig& config, int pp_rank,
                        std::optional<int> vp_stage);
// Every stage, ordered by (vp_stage, pp_rank), i.e. in model order.
std::vector<StageSlice> allocate_stages(const ParsedPattern& parsed, const PipelineConfig& config);
// Logical index of the item that starts at physical offset `physical` (G4 if inside a group).
int logical_offset_of(const ParsedPattern& parsed, int physical);

}  // namespace ht::patterns
