// `hybrid-twin train`: trains a hybrid model on byte-level tokens of a real text with the CPU
// engine (pattern -> HybridModel -> forward/backward -> AdamW), printing the loss of every step
// on stderr and a summary (or --json) on stdout; optionally writes and resumes checkpoints and
// imports a GPT checkpoint.
#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "ht/engine/checkpoint.hpp"
#include "ht/engine/data.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/engine/exec/plan_walk.hpp"
#include "ht/engine/memory_estimate.hpp"
#include "ht/engine/model.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/process_memory.hpp"
#include "ht/io/interrupt.hpp"
#include "ht/io/output_file.hpp"
#include "ht/io/log.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/overlap.hpp"
#include "cuda_rows.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "model_flags.hpp"

namespace ht::cli {
namespace {

namespace he = ht::engine;

struct TrainArgs {
  std::string pattern;
  he::ModelConfig cfg;
  he::AdamWConfig opt;
  int steps = 60;
  std::uint64_t seed = 1234;
  int batch = 8;
  int seq = 64;
  std::string data;
  std::string checkpoint;
  int checkpoint_every = 0;
  std::string resume;
  std::string import_gpt;
  bool json_out = false;
  bool quiet = false;
  std::string backend = "cpu";
  // Executor mode (any of these set): the plan runs on EP ranks with the overlap executor.
  schedule::ParallelConfig parallel;
  ScheduleFlags schedule_flags;
  double link_gbps = 0, link_latency_us = 0;
  std::string comm_priority = "realtime";
  std::string trace;
  std::string trace_step = "median";
  bool estimate_memory = false;  // --estimate-memory: print what the run needs and stop
  // Flags only the executor runs (a device run always takes the device executor).
  bool executor_flags() const {
    return parallel.ep > 1 || parallel.dp > 1 || parallel.pp > 1 || parallel.vpp > 0 || parallel.microbatches > 1 ||
           schedule_flags.overlap_on || schedule_flags.overlap_off || schedule_flags.delay_on ||
           schedule_flags.delay_off || link_gbps > 0 || link_latency_us > 0;
  }
  bool executor_mode() const { return executor_flags() || !trace.empty(); }
  int devices = 1;  // --devices: the device executor's ranks over this many devices of one process
};

// The memory check every path runs before it allocates (engine/memory_estimate.hpp); with
// --estimate-memory it prints the estimate instead (JSON with --json) and the command stops: true.
template <class Estimate>
bool memory_gate(const TrainArgs& a, const patterns::ParsedPattern& parsed, Estimate&& estimate, int ranks) {
  he::check_batch_tokens(a.batch, a.seq);  // before the sizes go into a model description
  const he::MemoryEstimate need = estimate();
  if (!a.estimate_memory) {
    he::check_training_memory(need, parsed, a.batch, a.seq);
    return false;
  }
  const double gib = double(io::kGiB), available = io::available_memory_bytes();
  if (a.json_out) {
    std::cout << nlohmann::json{{"pattern", parsed.text},
                                {"ranks", ranks},
                                {"parameters", need.parameters},
                                {"memory_gib", need.bytes / gib},
                                {"activations_gib", need.activations / gib},
                                {"available_gib", available / gib},
                                {"fits", need.bytes <= available}}
                     .dump()
              << "\n";
  } else {
    std::cout << std::setprecision(3) << "memory       about " << need.bytes / gib << " GiB for '" << parsed.text
              << "' on " << ranks << (ranks == 1 ? " rank" : " ranks") << ": " << need.parameters
              << " parameters with their gradients and AdamW moments (" << (need.bytes - need.activations) / gib
              << " GiB) + " << need.activations / gib << " GiB of activations at the plan's peak\n"
              << "available    " << available / gib << " GiB (" << (need.bytes <= available ? "fits" : "DOES NOT FIT")
              << ")\n";
  }
  return true;
}

// Executor mode: --batch sequences per microbatch on each EP rank, --microbatches per step, so a
// step sees ep * microbatches * batch sequences. The plan is the one `hybrid-twin plan` and
// `simulate` build for the same flags; --trace writes one step's measured timeline: the median
// step (by span) of the steps after the first, the last, or a given step. The first step pays first-touch page
// faults and allocator growth (3-4x a later step); later single steps jitter by +-15 % on a
// small shared machine, so a calibration or a comparison taken from the median step is the
// representative one.
//
// --backend cuda|cuda-host: the same plan on the device EP executor (ranks sharing the device, a
// compute stream each and one comm stream, AdamW on the device); no --link-* (the ranks copy on the
// device) and the device executor's scope (PP 1).
//
// What run_executor drives: the CPU executor or a device executor.
struct StepRunner {
  int ranks = 0, data_ranks = 0;
  const schedule::Plan* plan = nullptr;
  std::string device;
  std::function<void()> zero_grad;
  std::function<he::exec::StepResult(const std::vector<std::vector<he::Batch>>&)> step;
  std::function<double(const he::AdamWConfig&)> optimizer_step;
  he::exec::Owned owned;
};

// --checkpoint: the directory written every --checkpoint-every steps and at the end. With one,
// SIGINT/SIGTERM stop the run between steps (or abandon a checkpoint being written): the last
// completed checkpoint stays loadable, and the exit code is 128 + signal.
class Checkpointer {
 public:
  explicit Checkpointer(const TrainArgs& a) : a_(a) {
    if (!a.checkpoint.empty()) deferred_.emplace();
  }
  bool on() const { return !a_.checkpoint.empty(); }
  // Whether to write after step `done` (1-based) of this run's steps, before the last: every N.
  bool due(int done) const {
    return on() && a_.checkpoint_every > 0 && done % a_.checkpoint_every == 0 && done < a_.steps;
  }
  // Writes `model` and `state` (what `fill` puts there first) as step `at`, or returns the exit
  // code of an interrupted run.
  std::optional<int> save(std::int64_t at, const std::function<void()>& fill, he::HybridModel<float>& model,
                          const he::AdamWState<float>& state) {
    if (io::interrupt_signal() != 0) return stop(at);
    fill();
    try {
      he::save_checkpoint(a_.checkpoint, model, &state, at, a_.seed);
    } catch (const io::IoError& e) {
      if (e.code() == io::IoErrorCode::Interrupted) return stop(at);
      throw;
    }
    saved_ = at;
    return std::nullopt;
  }
  // The exit code of a run interrupted after step `done`, with a line saying what was kept.
  int stop(std::int64_t done) const {
    const int sig = io::interrupt_signal();
    io::log::Line("train", false) << "interrupted by " << io::signal_name(sig) << " after step " << done
                                  << "; checkpoint '" << a_.checkpoint << "' "
                                  << (saved_ ? "holds step " + std::to_string(*saved_)
                                             : std::string("was left as it was"));
    return 128 + sig;
  }

 private:
  const TrainArgs& a_;
  std::optional<io::DeferredInterrupts> deferred_;
  std::optional<std::int64_t> saved_;
};

// One step's overlap summary as `train --json` reports it.
nlohmann::json overlap_json(const traces::OverlapSummary& s) {
  return {{"span_s", s.span_s},
          {"compute_busy_s", s.compute_busy_s},
          {"comm_busy_s", s.comm_busy_s},
          {"comm_exposed_s", s.comm_exposed_s},
          {"hidden_fraction", s.hidden_fraction}};
}

// --trace of process p > 0 under mpirun: the name with ".proc<p>" before its extension (process 0
// writes the name given).
std::string process_trace_path(const std::string& path, const he::cuda::ProcessGroup* group) {
  if (!group || group->process() == 0) return path;
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string tag = ".proc" + std::to_string(group->process());
  return ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

int run_executor(TrainArgs a) {
  if (a.parallel.dp == 1) a.parallel.dp = a.parallel.ep;  // EP groups inside DP: at least EP ranks
  const bool checkpoints = !a.resume.empty() || !a.checkpoint.empty() || !a.import_gpt.empty();
  if (checkpoints && he::cuda::launch_from_env().size > 1)
    throw UsageError("--checkpoint, --resume and --import-gpt run in one process: not under mpirun yet");
  if (!a.resume.empty()) {  // the checkpoint defines the model; dimension flags are ignored
    const auto manifest = he::read_manifest(a.resume);
    a.cfg = manifest.config;
    a.seed = manifest.seed;
    if (a.pattern.empty()) a.pattern = manifest.pattern;
  }
  const std::string pattern_text = a.pattern.empty() ? "M*-E" : a.pattern;
  const auto parsed = patterns::parse(pattern_text);
  const schedule::ScheduleOptions so = a.schedule_flags.resolve(a.parallel, parsed.mtp_depths);
  const schedule::ModelDims dims = he::exec::schedule_dims(a.cfg, a.batch, a.seq);
  schedule::Plan plan = schedule::build_plan(parsed, dims, a.parallel, so);
  // Under mpirun the device executor's ranks are split over the processes: NCCL between GPUs, MPI
  // on the host emulation. Process 0 reports; every process writes its ranks' trace.
  std::unique_ptr<he::cuda::ProcessGroup> group;
  if (he::cuda::launch_from_env().size > 1) {
    if (a.devices > 1)
      throw UsageError("--devices drives several devices from one process; under mpirun each process takes one");
    group = a.backend == "cuda" ? he::cuda::make_nccl_group() : he::cuda::make_mpi_group();
  }
  if (a.devices > plan.global_ranks())
    throw UsageError("--devices " + std::to_string(a.devices) + " splits the device executor's ranks over the devices: "
                     "the run has " + std::to_string(plan.global_ranks()) + " (give --ep or --dp)");
  const bool lead = !group || group->process() == 0;
  if (!lead) a.quiet = true;
  // Either executor's ranks each hold their stage and their experts, each layer's state from its
  // first node to its last; the device executor's keep a host copy of what they hold besides.
  const int layout_ranks = a.parallel.global_ranks();
  const auto need = [&] {
    auto e = he::estimate_training_memory(parsed, dims, a.parallel, plan, true, a.backend == "cpu" ? 0.0 : 8.0);
    // Checkpoints keep one whole model beside the ranks (values, gradients and AdamW moments: 16
    // bytes a parameter) and one rank's moments in transit while it is gathered (8 at the most).
    if (checkpoints) e.bytes += 24.0 * he::estimate_training_memory(parsed, a.cfg, a.batch, a.seq).parameters;
    return e;
  };
  if (memory_gate(a, parsed, need, layout_ranks)) return 0;
  if (!a.checkpoint.empty()) io::check_output_directory(a.checkpoint, "checkpoint directory");
  if (!a.trace.empty()) io::check_output_file(process_trace_path(a.trace, group.get()), "trace");
  std::unique_ptr<he::exec::Executor> cpu;
  std::unique_ptr<he::cuda::DeviceExecutor> dev;
  StepRunner ex;
  if (a.backend == "cpu") {
    he::exec::ExecutorOptions eo;
    eo.link.bandwidth_gbps = a.link_gbps;
    eo.link.latency_us = a.link_latency_us;
    eo.comm_realtime = a.comm_priority == "realtime";
    cpu = std::make_unique<he::exec::Executor>(parsed, a.cfg, a.seed, std::move(plan), eo);
    auto& e = *cpu;
    ex = {e.ranks(), e.data_ranks(), &e.plan(), "cpu", [&e] { e.zero_grad(); },
          [&e](const auto& b) { return e.step(b); }, [&e](const auto& o) { return e.optimizer_step(o); },
          he::exec::owned(e)};
  } else {
    if (a.link_gbps > 0 || a.link_latency_us > 0)
      throw UsageError("--link-gbps and --link-latency-us throttle the CPU executor's in-process link; the device "
                       "executor's ranks copy on the device (drop them with --backend " + a.backend + ")");
    he::cuda::DeviceExecutorOptions dev_opts;
    dev_opts.group = group.get();
    const he::cuda::DeviceExecutorFactory make =
        a.backend == "cuda" ? he::cuda::DeviceExecutorFactory(he::cuda::make_cuda_executor)
                            : he::cuda::DeviceExecutorFactory(he::cuda::make_host_executor);
    if (a.devices > 1)  // one process driving several devices, a thread each
      dev = he::cuda::make_multi_device_executor(
          make, a.backend == "cuda" ? he::cuda::make_nccl_fabric(a.devices) : he::cuda::make_host_fabric(a.devices),
          parsed, a.cfg, a.seed, std::move(plan), dev_opts);
    else
      dev = make(parsed, a.cfg, a.seed, std::move(plan), dev_opts);
    auto& e = *dev;
    ex = {e.ranks(), e.ranks(), &e.plan(), e.device(), [&e] { e.zero_grad(); },
          [&e](const auto& b) { return e.step(b); }, [&e](const auto& o) { return e.optimizer_step(o); },
          he::cuda::owned(e)};
  }
  const int ranks = ex.ranks, data_ranks = ex.data_ranks, mbs = a.parallel.microbatches;
  // Checkpoints as one model's (engine/checkpoint.hpp, the format of a run without executor flags):
  // each parameter and its moments from an owner; on resume every holder takes them.
  std::optional<he::HybridModel<float>> whole;
  he::AdamWState<float> state;
  std::int64_t start_step = 0;
  if (checkpoints) whole.emplace(parsed, a.cfg, a.seed);
  if (!a.resume.empty()) start_step = he::load_checkpoint(a.resume, *whole, &state).step;
  if (!a.import_gpt.empty()) he::import_gpt(a.import_gpt, *whole);
  if (!a.resume.empty() || !a.import_gpt.empty())
    he::exec::scatter_model(ex.owned, *whole, a.resume.empty() ? nullptr : &state);
  Checkpointer saver(a);
  const auto gather = [&] { he::exec::gather_model(ex.owned, *whole, &state); };
  const auto corpus = he::load_corpus(a.data);
  std::size_t nparams = 0;  // the model's: non-expert ones from DP rank 0, experts from the first EP group
  for (int r = 0; r < ranks; ++r)
    for (auto& p : ex.owned.parameters(r))
      if (ex.owned.owns(r, p.canonical) &&
          r % data_ranks < (he::exec::expert_index(p.canonical) >= 0 ? ex.plan->ep : 1))
        nparams += p.value->size();
  if (group) {  // every process counted its ranks' share
    const auto shares = group->all_gather({static_cast<double>(nparams)});
    nparams = 0;
    for (const double n : shares) nparams += static_cast<std::size_t>(n);
  }
  if (!a.quiet)
    io::log::Line("train", false) << "train '" << parsed.text << "' on " << ranks << " ranks (EP " << a.parallel.ep
                                  << ", PP " << a.parallel.pp << ")" << (dev ? " on " + ex.device : std::string())
                                  << ", " << ex.plan->schedule << " (" << (so.overlap ? "overlap" : "no overlap")
                                  << (so.delay_wgrad ? ", delayed wgrad" : "") << "), " << mbs << " microbatches of "
                                  << a.batch << " x " << a.seq << " bytes per data rank";

  std::vector<double> losses, lm_losses, step_seconds;
  double seconds = 0;
  // Timelines of the candidate steps for --trace-step median (all but the first; the latest 63
  // when a run is longer, to bound memory), or only the last.
  std::deque<std::pair<int, traces::Timeline>> kept;
  traces::OverlapSummary last_summary;
  const std::int64_t per_step = static_cast<std::int64_t>(data_ranks) * mbs;
  for (int i = 0; i < a.steps; ++i) {
    const std::int64_t step = start_step + i;
    std::vector<std::vector<he::Batch>> batches(static_cast<std::size_t>(data_ranks));
    for (int r = 0; r < data_ranks; ++r)
      for (int m = 0; m < mbs; ++m)
        batches[static_cast<std::size_t>(r)].push_back(
            he::sample_batch(corpus, a.batch, a.seq, a.seed, step * per_step + r * mbs + m));
    const auto t0 = std::chrono::steady_clock::now();
    ex.zero_grad();
    he::exec::StepResult res = ex.step(batches);
    const double gnorm = ex.optimizer_step(a.opt);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += dt;
    step_seconds.push_back(dt);
    losses.push_back(res.total);
    lm_losses.push_back(res.lm);
    last_summary = traces::summarize(res.timeline);
    if (a.trace_step == "median") {
      if (i > 0 || a.steps == 1) kept.emplace_back(i, std::move(res.timeline));
      if (kept.size() > 63) kept.pop_front();
    } else if (a.trace_step == "last" || std::to_string(i + 1) == a.trace_step) {
      kept.clear();
      kept.emplace_back(i, std::move(res.timeline));
    }
    if (!a.quiet)
      io::log::Line("step", false) << "step " << std::setw(5) << step + 1 << "  loss " << std::fixed
                                   << std::setprecision(4) << losses.back() << "  lm " << lm_losses.back() << "  |g| "
                                   << std::setprecision(3) << gnorm << "  " << std::setprecision(1) << dt * 1e3
                                   << " ms  " << std::setprecision(0)
                                   << static_cast<double>(per_step) * a.batch * a.seq / dt << " tok/s";
    if (saver.due(i + 1))
      if (const auto code = saver.save(step + 1, gather, *whole, state)) return *code;
    if (io::interrupt_signal() != 0) return saver.stop(step + 1);
  }
  if (saver.on())
    if (const auto code = saver.save(start_step + a.steps, gather, *whole, state)) return *code;
  // The traced step: the kept step whose span is the median (the lower middle of an even count).
  std::vector<std::pair<double, std::size_t>> by_span;
  for (std::size_t k = 0; k < kept.size(); ++k) by_span.emplace_back(traces::summarize(kept[k].second).span_s, k);
  std::sort(by_span.begin(), by_span.end());
  traces::Timeline traced;
  int traced_index = -1;
  if (!by_span.empty()) {
    auto& chosen = kept[by_span[(by_span.size() - 1) / 2].second];
    traced_index = chosen.first;
    traced = std::move(chosen.second);
  }
  traced.metadata["model_dims"] = schedule::model_dims_to_json(dims);
  traced.metadata["ep"] = std::to_string(a.parallel.ep);
  traced.metadata["microbatches"] = std::to_string(mbs);
  traced.metadata["overlap"] = so.overlap ? "true" : "false";
  traced.metadata["delay_wgrad"] = so.delay_wgrad ? "true" : "false";
  traced.metadata["step"] = std::to_string(traced_index + 1);
  traced.metadata["step_choice"] = a.trace_step;
  traced.metadata["backend"] = a.backend;
  if (group) {
    traced.metadata["process"] = std::to_string(group->process());
    traced.metadata["processes"] = std::to_string(group->processes());
  }
  if (!a.trace.empty() && a.steps > 0) traces::write_chrome_trace(traced, process_trace_path(a.trace, group.get()));
  if (!lead) return 0;
  const traces::OverlapSummary sum = traces::summarize(traced);
  const double tokens_per_s = seconds > 0 ? static_cast<double>(a.steps * per_step) * a.batch * a.seq / seconds : 0.0;
  const double final_loss = losses.empty() ? 0.0 : losses.back();
  if (a.json_out) {
    nlohmann::json j = {{"pattern", parsed.text},
                        {"parameters", nparams},
                        {"ep", a.parallel.ep},
                        {"pp", a.parallel.pp},
                        {"vpp", a.parallel.vpp},
                        {"microbatches", mbs},
                        {"schedule", ex.plan->schedule},
                        {"overlap", so.overlap},
                        {"backend", a.backend},
                        {"device", ex.device},
                        {"delay_wgrad", so.delay_wgrad},
                        {"steps", a.steps},
                        {"batch", a.batch},
                        {"seq", a.seq},
                        {"seed", a.seed},
                        {"data", corpus.source},
                        {"losses", losses},
                        {"lm_losses", lm_losses},
                        {"final_loss", final_loss},
                        {"step_seconds", step_seconds},
                        {"tokens_per_s", tokens_per_s},
                        {"seconds", seconds},
                        {"link_gbps", a.link_gbps},
                        {"link_latency_us", a.link_latency_us},
                        {"last_step", overlap_json(last_summary)},
                        {"traced_step", overlap_json(sum)},
                        {"config", he::config_to_json(a.cfg)}};
    j["traced_step"]["step"] = traced_index + 1;
    j["traced_step"]["choice"] = a.trace_step;
    if (!a.trace.empty()) j["trace"] = a.trace;
    if (!a.checkpoint.empty()) j["checkpoint"] = a.checkpoint;
    j["start_step"] = start_step;
    j["processes"] = group ? group->processes() : 1;
    j["devices"] = group ? group->processes() : a.devices;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "pattern      " << parsed.text << "\n"
              << "ranks        " << ranks << " (EP " << a.parallel.ep << ", PP " << a.parallel.pp << "), " << ex.plan->schedule << ", " << mbs << " microbatches"
              << (dev ? " on " + ex.device : std::string()) << "\n"
              << "parameters   " << nparams << "\n"
              << "data         " << corpus.source << " (" << corpus.bytes.size() << " bytes)\n";
    if (!losses.empty())
      std::cout << "loss         " << std::fixed << std::setprecision(4) << losses.front() << " -> " << final_loss << "\n"
                << "tokens/s     " << std::setprecision(0) << tokens_per_s << "\n"
                << (a.trace_step == "median" && a.steps > 1 ? "median step  " : "last step    ")
                << std::setprecision(2) << sum.span_s * 1e3 << " ms, all-to-all "
                << sum.comm_busy_s * 1e3 << " ms busy, " << sum.comm_exposed_s * 1e3 << " ms exposed, hidden "
                << std::setprecision(1) << sum.hidden_fraction * 100 << " %\n"
                << std::defaultfloat;
    if (!a.trace.empty()) std::cout << "trace        " << a.trace << "\n";
    if (!a.checkpoint.empty())
      std::cout << "checkpoint   " << a.checkpoint << " (step " << start_step + a.steps << ")\n";
  }
  return 0;
}

int run(TrainArgs a) {
  const bool on_device = a.backend != "cpu";
  if (a.backend == "cuda" && !cuda_usable_or_say_why()) return 2;
  if (a.steps < 0) throw UsageError("--steps must be >= 0");
  if (a.trace_step != "median" && a.trace_step != "last" && std::stoll(a.trace_step) > a.steps)
    throw UsageError("--trace-step " + a.trace_step + " is past the last step (" + std::to_string(a.steps) + ")");
  if (const auto launch = he::cuda::launch_from_env(); launch.size > 1 && !on_device)
    throw UsageError("under mpirun (" + std::to_string(launch.size) + " processes) train splits the device executor's "
                     "ranks over the processes: use --backend cuda or cuda-host with --ep (the CPU executor and "
                     "one model run in one process)");
  if (a.devices < 1) throw UsageError("--devices must be >= 1");
  if (a.devices > 1 && !on_device)
    throw UsageError("--devices splits the device executor's ranks over devices: use it with --backend cuda or "
                     "cuda-host and --ep");
  // The executors: the device's for every device run (one rank by default), the CPU's with
  // executor flags or --trace; else one HybridModel on the CPU, the reference.
  if (on_device || a.executor_mode()) return run_executor(std::move(a));
  he::AdamWState<float> state;
  std::int64_t start_step = 0;
  std::string pattern_text = a.pattern;
  if (!a.resume.empty()) {
    const auto manifest = he::read_manifest(a.resume);
    a.cfg = manifest.config;  // the checkpoint defines the model; dimension flags are ignored
    a.seed = manifest.seed;
    if (pattern_text.empty()) pattern_text = manifest.pattern;
  }
  if (pattern_text.empty()) pattern_text = "M*-E";  // the small default model
  const auto parsed = patterns::parse(pattern_text);
  // Everything that can be refused is refused before the first step: the memory the sizes need,
  // and the places the checkpoint and the trace go to.
  if (memory_gate(
          a, parsed, [&] { return he::estimate_training_memory(parsed, a.cfg, a.batch, a.seq); }, 1))
    return 0;
  if (!a.checkpoint.empty()) io::check_output_directory(a.checkpoint, "checkpoint directory");
  if (!a.trace.empty()) io::check_output_file(a.trace, "trace");
  he::HybridModel<float> model(parsed, a.cfg, a.seed);
  if (!a.resume.empty()) start_step = he::load_checkpoint(a.resume, model, &state).step;
  if (!a.import_gpt.empty()) he::import_gpt(a.import_gpt, model);
  const auto corpus = he::load_corpus(a.data);
  const std::size_t nparams = model.num_parameters();
  if (!a.quiet)
    io::log::Line("train", false) << "train '" << parsed.text << "': " << nparams << " parameters, batch " << a.batch
                                  << " x " << a.seq << " bytes of " << corpus.source << " (" << corpus.bytes.size()
                                  << " bytes)";

  Checkpointer saver(a);
  const auto in_place = [] {};  // the model and state are the checkpoint's already
  std::vector<double> losses, lm_losses;
  double seconds = 0;
  for (int i = 0; i < a.steps; ++i) {
    const std::int64_t step = start_step + i;
    const he::Batch batch = he::sample_batch(corpus, a.batch, a.seq, a.seed, step);
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    const he::LossBreakdown loss = model.forward(batch);
    model.backward();
    auto params = model.parameters();
    const double gnorm = he::adamw_step(a.opt, state, params);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += dt;
    losses.push_back(loss.total);
    lm_losses.push_back(loss.lm);
    if (!a.quiet) {
      double mtp = 0;
      for (double v : loss.mtp) mtp += v;
      io::log::Line("step", false) << "step " << std::setw(5) << step + 1 << "  loss " << std::fixed
                                   << std::setprecision(4) << loss.total << "  lm " << loss.lm << "  mtp " << mtp
                                   << "  aux " << loss.aux << "  z " << loss.z << "  |g| " << std::setprecision(3)
                                   << gnorm << "  " << std::setprecision(0) << static_cast<double>(a.batch) * a.seq / dt
                                   << " tok/s";
    }
    if (saver.due(i + 1))
      if (const auto code = saver.save(step + 1, in_place, model, state)) return *code;
    if (io::interrupt_signal() != 0) return saver.stop(step + 1);
  }
  const std::int64_t end_step = start_step + a.steps;
  if (saver.on())
    if (const auto code = saver.save(end_step, in_place, model, state)) return *code;
  const double tokens_per_s = seconds > 0 ? static_cast<double>(a.steps) * a.batch * a.seq / seconds : 0.0;
  const double final_loss = losses.empty() ? 0.0 : losses.back();

  if (a.json_out) {
    nlohmann::json j = {{"pattern", parsed.text},
                        {"parameters", nparams},
                        {"start_step", start_step},
                        {"steps", a.steps},
                        {"batch", a.batch},
                        {"seq", a.seq},
                        {"seed", a.seed},
                        {"backend", a.backend},
                        {"data", corpus.source},
                        {"losses", losses},
                        {"lm_losses", lm_losses},
                        {"final_loss", final_loss},
                        {"tokens_per_s", tokens_per_s},
                        {"seconds", seconds},
                        {"config", he::config_to_json(a.cfg)}};
    if (!a.checkpoint.empty()) j["checkpoint"] = a.checkpoint;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "pattern      " << parsed.text << "\n"
              << "parameters   " << nparams << "\n"
              << "data         " << corpus.source << " (" << corpus.bytes.size() << " bytes)\n"
              << "steps        " << start_step << " -> " << end_step << "\n";
    if (!losses.empty())
      std::cout << "loss         " << std::fixed << std::setprecision(4) << losses.front() << " -> " << final_loss
                << " (lm " << lm_losses.front() << " -> " << lm_losses.back() << ")\n"
                << "tokens/s     " << std::setprecision(0) << tokens_per_s << "\n";
    if (!a.checkpoint.empty()) std::cout << "checkpoint   " << a.checkpoint << "\n";
  }
  return 0;
}

const Registration reg{{
    "train",
    "Train a hybrid model with the CPU engine on byte-level text (loss per step on stderr)",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<TrainArgs>();
      auto& c = a->cfg;
      sub.add_option("--pattern", a->pattern, "hybrid layer pattern, e.g. 'M[*E]-/*E' (default M*-E, or the checkpoint's with --resume)");
      sub.add_option("--steps", a->steps, "optimizer steps to run")->capture_default_str();
      sub.add_option("--seed", a->seed, "seed of the init and of the batch order")->capture_default_str();
      sub.add_option("--lr", a->opt.lr, "AdamW learning rate")->capture_default_str();
      sub.add_option("--weight-decay", a->opt.weight_decay, "AdamW decoupled weight decay (matrices only)")
          ->capture_default_str();
      sub.add_option("--clip", a->opt.clip_norm, "global gradient-norm clip (0 = off)")->capture_default_str();
      sub.add_option("--batch", a->batch, "sequences per step")->check(kPositive)->capture_default_str();
      sub.add_option("--seq", a->seq, "bytes per sequence")->check(kPositive)->capture_default_str();
      sub.add_option("--data", a->data, "training text (default: an OS license text, else the built-in text)");
      sub.add_option("--checkpoint", a->checkpoint, "directory to write the checkpoint to at the end")->check(kOutputPath);
      sub.add_option("--checkpoint-every", a->checkpoint_every, "also write it every N steps")
          ->check(kNonNegative);
      sub.add_option("--resume", a->resume, "continue from this checkpoint directory (its config and seed)");
      sub.add_option("--import-gpt", a->import_gpt, "initialise attention/MLP layers from a GPT safetensors file");
      sub.add_flag("--json", a->json_out, "print one JSON object instead of the summary");
      sub.add_flag("--quiet", a->quiet, "no per-step progress on stderr");
      sub.add_flag("--estimate-memory", a->estimate_memory,
                   "print the memory the run needs (the twin's memory walk over the run's plan, with the engine's "
                   "model) and the memory this process may use, then stop (JSON with --json)");
      sub.add_option("--devices", a->devices,
                     "with --backend cuda|cuda-host and --ep: split the ranks over N devices driven by this process, "
                     "a thread each (cuda: GPUs 0..N-1, NCCL; cuda-host: N threads)")
          ->capture_default_str();
      sub.add_option("--backend", a->backend,
                     "cpu; cuda: forward/backward and AdamW on the GPU by the device executor (one rank, or with "
                     "--dp, --ep and the other schedule flags its ranks sharing the GPU); cuda-host: the same CUDA "
                     "code on the host emulation (no GPU). Under mpirun -np P with --ep, each process runs EP/P of "
                     "the ranks (cuda: one GPU per process on a node, NCCL; cuda-host: MPI)")
          ->check(CLI::IsMember({"cpu", "cuda", "cuda-host"}))
          ->capture_default_str();
      add_parallel_flags(sub, a->parallel);
      add_overlap_flags(sub, a->schedule_flags);
      const char* x = "Executor (EP ranks as threads)";
      sub.add_option("--link-gbps", a->link_gbps, "throttle each rank's egress link to X GB/s (0 = off)")
          ->check(kNonNegative)->group(x);
      sub.add_option("--comm-priority", a->comm_priority,
                     "comm stream threads at real-time priority where the OS allows it (root or CAP_SYS_NICE; "
                     "the trace records what was granted), or normal")
          ->check(CLI::IsMember({"realtime", "normal"}))
          ->capture_default_str()
          ->group(x);
      sub.add_option("--link-latency-us", a->link_latency_us, "latency per message in microseconds (0 = none)")
          ->check(kNonNegative)->group(x);
      sub.add_option("--trace", a->trace, "write one step's measured timeline as Chrome-trace JSON (under mpirun, process p > 0 writes "
                     "NAME.proc<p>.json with its ranks)")->check(kOutputPath)->group(x);
      sub.add_option("--trace-step", a->trace_step,
                     "which step --trace writes (and the summary reports): the median step after the first, the "
                     "last, or step N (1-based; the same N in two runs of one seed sees the same data)")
          ->check(CLI::Validator(
              [](std::string& v) -> std::string {
                if (v == "median" || v == "last") return "";
                if (!v.empty() && v.size() < 10 && v.find_first_not_of("0123456789") == std::string::npos && v != "0" &&
                    v.front() != '0')
                  return "";
                return "expected median, last or a step number, got '" + v + "'";
              },
              "median|last|N"))
          ->capture_default_str()
          ->group(x);
      const char* g = "Model dimensions";
      sub.add_option("--hidden", c.hidden, "hidden size")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--heads", c.num_heads, "attention heads")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--kv-heads", c.num_kv_heads, "key/value heads (GQA)")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--head-dim", c.head_dim, "attention head size")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--window", c.window, "'W' attention window")->check(kPositive)->capture_default_str()->group(g);
      sub.add_flag("--rope,!--no-rope", c.rope, "rotary position embedding in attention")->group(g);
      sub.add_option("--ffn", c.ffn_hidden, "dense MLP width")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--experts", c.num_experts, "MoE experts")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--topk", c.moe_topk, "experts per token")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--moe-ffn", c.moe_ffn_hidden, "expert width")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--shared-ffn", c.moe_shared_ffn_hidden, "shared expert width (0 = none)")->check(kNonNegative)->capture_default_str()->group(g);
      sub.add_option("--aux-coeff", c.moe_aux_loss_coeff, "MoE load-balancing loss coefficient")->capture_default_str()->group(g);
      sub.add_option("--z-coeff", c.moe_z_loss_coeff, "MoE z-loss coefficient")->capture_default_str()->group(g);
      sub.add_option("--mamba-heads", c.mamba_num_heads, "Mamba2 heads")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--mamba-head-dim", c.mamba_head_dim, "Mamba2 head size")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--mamba-state", c.mamba_state_dim, "Mamba2 state size")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--gdn-heads", c.gdn_num_heads, "GDN q/k heads")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--gdn-v-heads", c.gdn_num_v_heads, "GDN value heads")->check(kPositive)->capture_default_str()->group(g);
      sub.add_option("--mtp-scale", c.mtp_loss_scaling, "MTP loss scaling factor")->capture_default_str()->group(g);
      sub.add_option("--init-std", c.init_std, "init standard deviation")->capture_default_str()->group(g);
      return [a] { return run(*a); };
    },
    40}};

}  // namespace
}  // namespace ht::cli
