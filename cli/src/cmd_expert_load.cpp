// `hybrid-twin expert-load`: Megatron's tokens-per-expert logs (--save-tokens-per-expert-interval)
// read into the busiest EP rank's load over the mean, the figure `simulate --expert-load` takes: a
// router's imbalance measured on your data instead of a model of it.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.hpp"
#include "ht/schedule/expert_load_log.hpp"

namespace ht::cli {
namespace {

struct ExpertLoadArgs {
  std::vector<std::string> paths;
  int ep = 0, etp = 1, experts = 0, gpus_per_node = 8;
  std::size_t top = 10;
  bool json = false;
};

int run(const ExpertLoadArgs& a) {
  std::vector<std::filesystem::path> paths(a.paths.begin(), a.paths.end());
  const auto report = ht::schedule::read_expert_load_log(paths, a.ep, a.etp, a.experts, a.gpus_per_node);
  std::cout << (a.json ? ht::schedule::expert_load_json(report) : ht::schedule::expert_load_table(report, a.top));
  return 0;
}

const Registration reg{{
    "expert-load",
    "Measure the busiest EP rank's expert load from Megatron's tokens-per-expert logs (for --expert-load)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ExpertLoadArgs>();
      sub.footer(
          "Megatron-LM writes the logs with --save-tokens-per-expert-interval N: every N iterations each "
          "rank appends one line per MoE layer to {save}/tokens_per_expert/rank<R>.jsonl, with the rows "
          "each of its local experts received in every forward. The EP group of rank r is Megatron's: "
          "the ranks r0 + ETP k (k < EP). In one forward a layer waits for its group's busiest rank; the "
          "figure is the slowest group's sum of busiest-rank rows over its sum of mean rows in an "
          "iteration, averaged over the iterations logged.");
      sub.add_option("LOGS", a->paths,
                     "rank<R>.jsonl files, or folders holding them (or holding tokens_per_expert/)")
          ->required();
      sub.add_option("--ep", a->ep, "the run's expert-parallel size (--expert-model-parallel-size)")
          ->required()
          ->check(CLI::Range(1, 1 << 20));
      sub.add_option("--etp", a->etp,
                     "the run's expert-tensor-parallel size (--expert-tensor-parallel-size; Megatron's default "
                     "is the TP size)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20));
      sub.add_option("--experts", a->experts,
                     "the model's routed experts (--num-experts): checks that EP x local experts is that many")
          ->check(CLI::Range(1, 1 << 24));
      sub.add_option("--gpus-per-node", a->gpus_per_node,
                     "GPUs a node (consecutive global ranks): for the busiest node's load, which DeepEP's RDMA "
                     "copies follow")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20));
      sub.add_option("--top", a->top, "hottest layers listed in the table")->capture_default_str();
      sub.add_flag("--json", a->json, "print JSON instead of a table");
      return [a] { return run(*a); };
    },
    27}};

}  // namespace
}  // namespace ht::cli
