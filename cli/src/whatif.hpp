// One what-if: the setup a replay needs (pattern, model, layout, schedule, platform, costs), the
// run it gives (plan, replay, memory, FLOPs) and its JSON summary. `simulate` runs one, sweeps and
// `search` run many; `merge` reads the summaries back.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/io/log.hpp"

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/platform.hpp"
#include "ht/sim/replay.hpp"

namespace ht::cli {

namespace hs = ht::schedule;
namespace sim = ht::sim;

// Everything one replay needs; sweeps copy and edit it.
struct Setup {
  std::string pattern;
  std::string model;  // the model card's name ("" without a card)
  hs::ModelDims dims;
  hs::ParallelConfig parallel;
  hs::ScheduleOptions options;
  sim::PlatformSpec platform;
  sim::CostModel costs;
  double memory_margin = 0;  // bytes kept free on every GPU (--memory-margin)

  // The pattern parsed: once per text however often a command asks (sweeps copy the setup and
  // share the parse; one that sets another pattern gets it parsed once). Throws PatternError.
  const ht::patterns::ParsedPattern& parsed() const;

  mutable std::shared_ptr<const ht::patterns::ParsedPattern> parsed_;  // of parsed_text_
  mutable std::string parsed_text_;
};

struct Run {
  hs::Plan plan;
  sim::SimResult result;
  double wall_s = 0;
  hs::ParallelConfig layout;
  hs::MemoryBreakdown memory;
  hs::RuntimeOverhead overhead;  // what the process holds beside its tensors
  double memory_margin = 0;      // bytes kept free (--memory-margin)
  double model_flops = 0;   // per step, Megatron's accounting
  double global_batch = 0;  // sequences per step
  int seq_len = 0;
  double hbm_bytes = 0;
  double peak_flops = 0;
  hs::ScheduleOptions options;  // what the plan was built with (the step physics among them)
  std::string model;            // the card's name ("" without a card)
  std::string platform;         // the platform's name and every setting (sim::describe), one line
};

// The schedule options a run builds with: placed on the setup's platform (sim::place), folded
// unless --no-fold or a measured routing names every rank; whether the plan then folds is the
// builder's decision (schedule/fold.hpp builds_folded), made once and recorded in the plan.
hs::ScheduleOptions build_options(const Setup& s);

// Builds the plan, estimates memory and FLOPs, replays; progress on stderr for large plans
// unless `quiet` (a search's workers: the search prints its own).
Run simulate(const Setup& s, const sim::ReplayOptions& replay_options, bool keep_timeline, bool quiet = false);

// Time and cost to train (--train-tokens, --gpu-hour-price): a token budget at the run's
// tokens per second, on its GPUs. tokens 0 = not asked.
struct TrainBudget {
  double tokens = 0;
  double gpu_hour_price = 0;  // currency units per GPU-hour; 0 = no cost
  bool asked() const { return tokens > 0; }
  // tokens, days, gpu_hours, gpu_hour_price and cost (null without a price), at `tokens_per_s`
  // on `gpus` GPUs (a run's, or a simulate --json object's).
  nlohmann::json json(double tokens_per_s, int gpus) const;
  // "1e+12 tokens in 24.9 days on 128 GPUs, 76512 GPU-hours, cost 191280 at 2.5 per GPU-hour"
  std::string line(double tokens_per_s, int gpus) const;
};
// "1T", "300B", "2.5e12", "800M", "1000": tokens; throws UsageError naming the text otherwise.
double parse_token_count(const std::string& text);
// --train-tokens and --gpu-hour-price as a command registers them; resolve() parses the text
// when the command runs (an empty or malformed count, a price without tokens: UsageError).
struct TrainBudgetFlags {
  std::string tokens_text;
  TrainBudget budget;
  CLI::Option* tokens_option = nullptr;
  TrainBudget resolve() const;
};
void add_train_budget_flags(CLI::App& sub, TrainBudgetFlags& flags);
// Adds "train" (TrainBudget::json) to each simulate --json object when the budget is asked.
void add_train_json(std::vector<nlohmann::json>& rows, const TrainBudget& budget);

inline constexpr double kGiB = 1024.0 * 1024 * 1024;
double tokens_per_s(const Run& r);
double tflops_per_gpu(const Run& r);
double mfu(const Run& r);
// HBM left after the tensors, the runtime overhead and the margin (negative: does not fit).
double free_bytes(const Run& r);
bool fits(const Run& r);

// What `simulate --json` prints (docs/twin.md lists the keys).
nlohmann::json summary_json(const Run& r);

std::string ms(double seconds);    // "12.345 ms"
std::string pct(double fraction);  // "12.3 %"
std::string gib(double bytes);     // "12.3 GiB"

}  // namespace ht::cli
