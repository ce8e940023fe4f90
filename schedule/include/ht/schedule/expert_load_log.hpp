// The busiest EP rank's expert load, measured: Megatron's tokens-per-expert log read into the
// figure `--expert-load` takes. Megatron-LM (`--save-tokens-per-expert-interval N`, Aug 2026)
// writes, every N iterations, one JSON line per (iteration, MoE layer) into
// {save}/tokens_per_expert/rank<R>.jsonl, R the global rank:
//
//   {"iter": 100, "block": "decoder", "layer": 3, "tpe": [[128, 64], [96, 80]]}
//   {"iter": 100, "block": "mtp", "mtp_idx": 0, "layer": 1, "tpe": [[50, 50]]}
//
// `tpe` holds one list per forward of that layer (each microbatch, again for each recomputation):
// the rows each of the rank's local experts received, as the experts' grouped GEMMs saw them.
// `layer` is the layer's index inside its model chunk (the pipeline stage, or one virtual stage of
// it: a rank's chunks share the numbers and their records join one list). The members of an EP
// group hold the same chunks and run them in the same order, so their j-th records are one
// all-to-all's worth of work. Megatron appends, so a resumed run logs an iteration again: the
// last lines stand.
//
// Megatron lays out expert ranks as etp + ETP (ep + EP (edp + EDP pp)) (order tp-cp-ep-dp-pp and
// its tp-cp-ep-pp-dp variant alike: EP sits next to expert-TP), so the EP group of rank r is the EP
// ranks r0 + ETP k, k < EP, with r0 = r mod ETP + ETP EP floor(r / (ETP EP)).
//
// The figure: in one EP group and one forward the layer takes as long as its busiest member
// (the combine waits for it), so the group's step costs sum(max) where an even router would cost
// sum(mean), over every record of the iteration; the step waits for the slowest group. The
// busiest-rank load is that ratio of the slowest group, averaged over the logged iterations.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ht::schedule {

struct ExpertLoadLayer {
  std::string name;       // "layer 3", "mtp 0 layer 1" (indices inside the model chunk)
  double mean_ratio = 0;  // busiest member over the mean, averaged over groups and records
  double max_ratio = 0;   // the largest single record's
};

struct ExpertLoadIteration {
  std::int64_t iter = 0;
  double factor = 0;           // the slowest EP group's sum(max) / sum(mean)
  double node_factor = 0;      // the largest sum(busiest node's rank mean) / sum(mean) of a group
  int slowest_group_rank = 0;  // the first rank of that group
};

struct ExpertLoadReport {
  int ranks = 0, ep = 1, etp = 1, groups = 0, local_experts = 0;
  std::int64_t records = 0;                               // (group, layer, forward) records compared
  std::int64_t empty_records = 0;                         // forwards in which no member received a row (left out)
  std::int64_t relogged = 0;  // lines an iteration logged again (a resumed run): the last kept
  std::vector<ExpertLoadIteration> iterations;            // in iteration order
  double factor = 1;                                      // mean over iterations: what --expert-load takes
  double node_factor = 1;  // the same with a node's ranks pooled: what --expert-node-load takes
  int gpus_per_node = 8;
  bool spans_nodes = false;                               // an EP group's members sit on more than one node
  double median_ratio = 1, p90_ratio = 1, max_ratio = 1;  // of single records
  std::vector<ExpertLoadLayer> layers;                    // hottest first
};

// Reads the logs. `paths`: rank<R>.jsonl files, or folders holding them (or holding a
// tokens_per_expert/ folder of them). Every EP group present must be whole for every layer and
// iteration it logged, with the same number of records on each member. Throws
// ScheduleError(BadLog) naming the file and line for anything malformed or inconsistent, and
// ScheduleError(Io) for a file that cannot be read. `experts` > 0 (the model's routed experts)
// also checks the EP size: local experts x ep must be that many.
ExpertLoadReport read_expert_load_log(const std::vector<std::filesystem::path>& paths, int ep, int etp, int experts = 0,
                                      int gpus_per_node = 8);

std::string expert_load_table(const ExpertLoadReport& report, std::size_t top_layers);
std::string expert_load_json(const ExpertLoadReport& report);

}  // namespace ht::schedule
