// Command-line flags shared by the commands that build a plan (plan, simulate, train): model
// dimensions (a preset, an optional --model FILE.json, then one flag per field overriding both),
// the parallel layout and the schedule options. Header-only so that it adds no source file to the
// CLI target; it keeps CLI11 out of the schedule library.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "command.hpp"
#include "ht/schedule/config.hpp"

namespace ht::cli {

struct ModelFlags {
  std::string preset = "default";  // "default" or "tiny"
  std::string model_file;          // JSON object of ModelDims fields
  std::map<std::string, int> values;
  std::map<std::string, CLI::Option*> options;

  // Preset, then the file, then every field flag given on the command line.
  schedule::ModelDims resolve() const {
    schedule::ModelDims dims = preset == "tiny" ? schedule::tiny_model() : schedule::ModelDims{};
    if (!model_file.empty()) dims = schedule::load_model_dims(model_file);
    for (const schedule::ModelField& f : schedule::model_fields()) {
      const auto it = options.find(std::string(f.name));
      if (it != options.end() && it->second->count() > 0) dims.*f.member = values.at(std::string(f.name));
    }
    schedule::validate(dims);
    return dims;
  }
};

// Registers --preset, --model and one --<field> flag per ModelDims field (e.g. --hidden,
// --num-experts); `flags` must outlive the parse.
inline void add_model_flags(CLI::App& sub, ModelFlags& flags) {
  sub.add_option("--preset", flags.preset, "model size preset before --model and field flags")
      ->check(CLI::IsMember({"default", "tiny"}))
      ->capture_default_str();
  sub.add_option("--model", flags.model_file, "model dimensions as a JSON object (FILE.json)")
      ->check(CLI::ExistingFile);
  for (const schedule::ModelField& f : schedule::model_fields()) {
    std::string flag = "--" + std::string(f.name);
    for (char& c : flag)
      if (c == '_') c = '-';
    int& slot = flags.values[std::string(f.name)];
    slot = 0;
    flags.options[std::string(f.name)] =
        sub.add_option(flag, slot, std::string(f.help))->group("Model dimensions");
  }
}

inline void add_parallel_flags(CLI::App& sub, schedule::ParallelConfig& config) {
  sub.add_option("--ep", config.ep, "expert-parallel size (EP groups split the dp ranks)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--pp", config.pp, "pipeline-parallel size")->capture_default_str()->group("Parallel layout");
  sub.add_option("--vpp", config.vpp, "virtual stages per pipeline rank (0 = none; needs '|' segments)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--dp", config.dp, "data-parallel size per pipeline stage (multiple of --ep)")
      ->capture_default_str()->group("Parallel layout");
  sub.add_option("--microbatches", config.microbatches, "microbatches per step")
      ->capture_default_str()->group("Parallel layout");
}

// Schedule switches. Overlap and delayed weight gradients default to on whenever ep > 1 (the
// overlap needs expert parallelism), and can be forced either way.
struct ScheduleFlags {
  schedule::ScheduleOptions options;
  bool overlap_on = false, overlap_off = false, delay_on = false, delay_off = false;

  // Overlap defaults to on when ep > 1, except for patterns with MTP depths: hybrid MTP never
  // overlaps (reference section 4, rule O3), so their default is the sequential schedule and
  // only an explicit --overlap meets the rule's error.
  schedule::ScheduleOptions resolve(const schedule::ParallelConfig& config, int mtp_depths = 0) const {
    if (overlap_on && overlap_off) throw UsageError("--overlap and --no-overlap contradict each other");
    if (delay_on && delay_off) throw UsageError("--delay-wgrad and --no-delay-wgrad contradict each other");
    schedule::ScheduleOptions o = options;
    o.overlap = overlap_on || (!overlap_off && config.ep > 1 && mtp_depths == 0);
    o.delay_wgrad = delay_on || (!delay_off && o.overlap);
    return o;
  }
};

// The four switches the engine and the twin share (--overlap, --no-overlap, --delay-wgrad,
// --no-delay-wgrad).
inline void add_overlap_flags(CLI::App& sub, ScheduleFlags& flags) {
  const char* group = "Schedule";
  sub.add_flag("--overlap", flags.overlap_on,
               "combined 1F1B with EP all-to-all overlap (default: on when ep > 1 and the pattern has no MTP)")
      ->group(group);
  sub.add_flag("--no-overlap", flags.overlap_off, "sequential schedule")->group(group);
  sub.add_flag("--delay-wgrad", flags.delay_on,
               "delayed weight-gradient (W) nodes (default: on with overlap)")
      ->group(group);
  sub.add_flag("--no-delay-wgrad", flags.delay_off, "weight gradients inside backward")->group(group);
}

inline void add_schedule_flags(CLI::App& sub, ScheduleFlags& flags) {
  const char* group = "Schedule";
  add_overlap_flags(sub, flags);
  sub.add_flag("--early-attn-release", flags.options.early_attn_release,
               "run pre_dispatch backward before the forward mlp (step 8)")
      ->group(group);
  sub.add_flag("--cuda-graphs", flags.options.cuda_graphs, "CUDA graphs (rejected with overlap)")->group(group);
  sub.add_option("--routing-skew", flags.options.routing_skew,
                 "Zipf exponent of expert load across EP ranks (0 = balanced)")
      ->capture_default_str()
      ->group(group);
}

}  // namespace ht::cli
