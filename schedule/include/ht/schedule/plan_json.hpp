// The plan's versioned JSON form, for the twin, outside tools and `hybrid-twin plan --json`:
//   {"format": "hybrid-twin-plan", "version": 1, "schedule": ..., "pattern": ..., "pp": ...,
//    "nodes": [{"id", "rank", "stream", "slot", "phase", "microbatch", "vp_stage", "layer",
//               "mtp", "symbols", "flops", "mem_bytes", "sends": [[peer, bytes], ...],
//               "collective", "deps": [...]}, ...],
//    "collectives": [{"id", "kind", "nodes"}], "ranks": [{"rank", "pp_rank", "ep_rank",
//    "dp_rank", "issue"}]}
// Writing is deterministic (same plan -> same bytes); reading validates everything and rejects
// unknown keys, so write -> read -> write is byte-identical and read gives an equal Plan.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "ht/schedule/plan.hpp"

namespace ht::schedule {

inline constexpr std::string_view kPlanFormatName = "hybrid-twin-plan";

std::string plan_to_json(const Plan& plan);         // one line + "\n"
Plan plan_from_json(std::string_view text);         // throws ScheduleError (BadPlan)
void save_plan(const std::filesystem::path& path, const Plan& plan);  // atomic
Plan load_plan(const std::filesystem::path& path);  // throws ScheduleError (Io, BadPlan)

}  // namespace ht::schedule
