// One what-if (see whatif.hpp).
#include "whatif.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <sstream>

#include "ht/io/process_memory.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/flops.hpp"
#include "ht/schedule/plan_size.hpp"

namespace ht::cli {

const ht::patterns::ParsedPattern& Setup::parsed() const {
  if (!parsed_ || parsed_text_ != pattern) {
    parsed_ = std::make_shared<const ht::patterns::ParsedPattern>(ht::patterns::parse(pattern));
    parsed_text_ = pattern;
  }
  return *parsed_;
}

hs::ScheduleOptions build_options(const Setup& s) {
  hs::ScheduleOptions options = s.options;
  sim::place(options, s.platform);
  options.fold = s.options.fold && s.costs.instances.empty();
  return options;
}

namespace {

// Memory a plan and its replay take, per estimated plan node and all-to-all transfer, above the
// process's own: measured on this project's code (peak RSS of `simulate --no-fold`, 2026-12-06:
// 150 MB for 3.7e5 nodes and 6.9e5 transfers, 231 MB for 3.7e5 and 6.2e6, 573 MB for 1.5e6 and
// 2.8e6, 655 MB for 3.3e6 and none, i.e. 186-328 bytes a node and 15 a transfer) and rounded up.
constexpr double kReplayBytesPerNode = 400;
constexpr double kReplayBytesPerTransfer = 32;
constexpr double kReplayBaseBytes = 64.0 * (1 << 20);

// A replay that cannot fit in what this process may use (physical memory, ulimit -v) is refused
// before the plan is built, with its estimate, instead of being killed part way through.
void check_replay_memory(const hs::PlanSize& size, double built) {
  const double need = kReplayBaseBytes + kReplayBytesPerNode * size.nodes + kReplayBytesPerTransfer * size.transfers;
  const double available = ht::io::available_memory_bytes();
  if (need <= available) return;
  char text[400];
  std::snprintf(text, sizeof text,
                "this replay needs about %.3g GiB (%.2g plan nodes and %.2g all-to-all transfers on %.0f simulated "
                "ranks), more than the %.3g GiB this process may use; drop --no-fold, or use fewer GPUs or microbatches",
                need / double(1 << 30), size.nodes, size.transfers, built, available / double(1 << 30));
  throw UsageError(text);
}

}  // namespace

Run simulate(const Setup& s, const sim::ReplayOptions& replay_options, bool keep_timeline, bool quiet) {
  Run run;
  const auto& parsed = s.parsed();
  run.options = build_options(s);
  const double built = static_cast<double>(hs::built_ranks(s.parallel, run.options).size());
  const hs::PlanSize size = hs::estimate_plan_size(parsed, s.parallel, built);
  hs::check_plan_size(parsed, s.parallel, built);  // the fixed limits first: they name the knob
  check_replay_memory(size, built);
  if (!quiet) {
    // A plan this large takes minutes to build and replay: say so before the first of them
    // (a 2048-GPU --no-fold run was silent for over ten minutes).
    if (size.nodes > 1e6 || size.transfers > 1e7) {
      char text[320];
      std::snprintf(
          text, sizeof text, "about %.2g nodes and %.2g transfers on %.0f simulated ranks; this can take minutes%s",
          size.nodes, size.transfers, built,
          built < s.parallel.global_ranks() ? ""
                                            : " (without --no-fold, ranks doing the same work are simulated once)");
      io::log::say("simulate") << text;
    }
  }
  run.plan = hs::build_plan(parsed, s.dims, s.parallel, run.options);
  run.layout = s.parallel;
  run.model = s.model;
  {
    std::string described = sim::describe(s.platform);
    std::replace(described.begin(), described.end(), '\n', ' ');
    run.platform = described;
  }
  run.memory = hs::peak_memory(parsed, s.dims, s.parallel, run.plan, s.options.precision);
  run.overhead = hs::runtime_overhead(parsed, s.dims, s.parallel, s.options.dispatcher);
  run.memory_margin = s.memory_margin;
  run.global_batch = double(s.parallel.dp) * s.parallel.microbatches * s.dims.micro_batch;
  run.model_flops = hs::model_flops_per_step(parsed, s.dims, run.global_batch);
  run.seq_len = s.dims.seq_len;
  run.hbm_bytes = s.platform.gpu.hbm_bytes;
  run.peak_flops = s.platform.gpu.peak_flops;
  sim::ReplayOptions o = replay_options;
  o.keep_timeline = keep_timeline;
  auto line = std::make_shared<io::log::Progress>("progress");
  if (run.plan.nodes.size() > 200000 && !quiet)
    o.progress = [line, start = std::chrono::steady_clock::now()](double f) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      char text[96];
      if (f >= 0.01)  // below 1 % an extrapolation says nothing yet
        std::snprintf(text, sizeof text, "simulating %3.0f %%, %.0f s, about %.0f s left", 100 * f, elapsed,
                      elapsed * (1 - f) / f);
      else
        std::snprintf(text, sizeof text, "simulating %3.1f %%, %.0f s", 100 * f, elapsed);
      line->draw(text, elapsed);
    };
  const auto t0 = std::chrono::steady_clock::now();
  run.result = sim::replay(run.plan, s.platform, s.costs, o);
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  line->clear();
  return run;
}

double tokens_per_s(const Run& r) { return r.global_batch * r.seq_len / r.result.summary.step_time_s; }
double tflops_per_gpu(const Run& r) {
  return r.model_flops / r.result.summary.step_time_s / r.result.summary.gpus / 1e12;
}
double mfu(const Run& r) { return tflops_per_gpu(r) * 1e12 / r.peak_flops; }
double free_bytes(const Run& r) { return r.hbm_bytes - r.memory.total() - r.overhead.total() - r.memory_margin; }
bool fits(const Run& r) { return free_bytes(r) >= 0; }

double parse_token_count(const std::string& text) {
  const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  std::size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  double scale = 1;
  if (end > 0 && end + 1 == text.size()) {
    switch (text.back()) {
      case 'K': case 'k': scale = 1e3; break;
      case 'M': scale = 1e6; break;
      case 'B': case 'G': scale = 1e9; break;
      case 'T': scale = 1e12; break;
      default: end = 0;
    }
  } else if (end != text.size()) {
    end = 0;
  }
  if (end == 0 || !std::isfinite(v * scale) || !(v * scale >= 1) || v * scale > 1e18)
    throw UsageError("--train-tokens '" + shown + "': expected a token count from 1 to 1e18, such as 300B, 1T or 2.5e12");
  return v * scale;
}

void add_train_budget_flags(CLI::App& sub, TrainBudgetFlags& f) {
  const char* group = "Time and cost to train";
  f.tokens_option =
      sub.add_option("--train-tokens", f.tokens_text, "token budget (300B, 1T, 2.5e12): days and GPU-hours to train it")
          ->group(group);
  sub.add_option("--gpu-hour-price", f.budget.gpu_hour_price, "price of one GPU-hour: the cost of --train-tokens")
      ->check(number_between(0, 1e6))
      ->group(group);
}

TrainBudget TrainBudgetFlags::resolve() const {
  TrainBudget b = budget;
  if (tokens_option != nullptr && tokens_option->count() > 0) b.tokens = parse_token_count(tokens_text);
  if (b.gpu_hour_price > 0 && !b.asked()) throw UsageError("--gpu-hour-price needs --train-tokens");
  return b;
}

void add_train_json(std::vector<nlohmann::json>& rows, const TrainBudget& budget) {
  if (!budget.asked()) return;
  for (nlohmann::json& r : rows) r["train"] = budget.json(r["tokens_per_s"].get<double>(), r["gpus"].get<int>());
}

nlohmann::json TrainBudget::json(double tokens_per_s, int gpus) const {
  const double hours = tokens / tokens_per_s / 3600;
  return {{"tokens", tokens},
          {"days", hours / 24},
          {"gpu_hours", hours * gpus},
          {"gpu_hour_price", gpu_hour_price > 0 ? nlohmann::json(gpu_hour_price) : nullptr},
          {"cost", gpu_hour_price > 0 ? nlohmann::json(hours * gpus * gpu_hour_price) : nullptr}};
}

std::string TrainBudget::line(double tokens_per_s, int gpus) const {
  const nlohmann::json j = json(tokens_per_s, gpus);
  char text[200];
  std::snprintf(text, sizeof text, "%.3g tokens in %.1f days on %d GPUs, %.0f GPU-hours", tokens,
                j["days"].get<double>(), gpus, j["gpu_hours"].get<double>());
  std::string out = text;
  if (gpu_hour_price > 0) {
    std::snprintf(text, sizeof text, ", cost %.0f at %g per GPU-hour", j["cost"].get<double>(), gpu_hour_price);
    out += text;
  }
  return out;
}

nlohmann::json summary_json(const Run& r) {
  const auto& s = r.result.summary;
  const auto& l = r.layout;
  const auto& m = r.memory;
  return {{"step_time_s", s.step_time_s},
          {"tokens_per_s", tokens_per_s(r)},
          {"model_tflops_per_gpu", tflops_per_gpu(r)},
          {"mfu", mfu(r)},
          {"memory_gib", m.total() / kGiB},
          {"memory_fits", fits(r)},
          {"memory",
           {{"rank", m.rank},
            {"weights_gib", m.weights / kGiB},
            {"gradients_gib", m.gradients / kGiB},
            {"optimizer_gib", m.optimizer / kGiB},
            {"activations_gib", m.activations / kGiB},
            {"microbatches_in_flight", m.microbatches_in_flight},
            {"parameters", m.parameters},
            {"hbm_gib", r.hbm_bytes / kGiB},
            {"runtime_gib", r.overhead.total() / kGiB},
            {"runtime",
             {{"cuda_context_gib", r.overhead.cuda_context / kGiB},
              {"nccl_gib", r.overhead.nccl / kGiB},
              {"nccl_communicators", r.overhead.communicators},
              {"dispatcher_gib", r.overhead.dispatcher / kGiB}}},
            {"margin_gib", r.memory_margin / kGiB},
            {"free_gib", free_bytes(r) / kGiB}}},
          {"layout",
           {{"gpus", l.global_ranks()}, {"tp", l.tp}, {"cp", l.cp}, {"pp", l.pp}, {"vpp", l.model_chunks()},
            {"dp", l.dp}, {"ep", l.ep}, {"etp", l.etp}, {"edp", l.edp()}, {"microbatches", l.microbatches},
            {"mbs", static_cast<int>(r.global_batch / (double(l.dp) * l.microbatches))},
            {"gbs", r.global_batch}, {"seq_len", r.seq_len}, {"recompute", hs::to_string(l.recompute)},
            {"offload", hs::to_string(l.offload)},
            {"grad_sync", l.optimizer.sync == hs::GradSync::Megatron ? "megatron" : "end-of-step"},
            {"distributed_optimizer", l.optimizer.distributed},
            {"fsdp", l.optimizer.fsdp},
            {"overlap_grad_reduce", l.optimizer.overlap_grad_reduce},
            {"overlap_param_gather", l.optimizer.overlap_param_gather},
            {"grad_reduce_in_bf16", l.optimizer.grad_reduce_bf16},
            {"account_embedding", r.plan.account_embedding}, {"account_loss", r.plan.account_loss},
            {"first_stage_layers", l.split.first_stage_layers >= 0 ? nlohmann::json(l.split.first_stage_layers) : nullptr},
            {"last_stage_layers", l.split.last_stage_layers >= 0 ? nlohmann::json(l.split.last_stage_layers) : nullptr}}},
          {"physics",
           {{"moe_dispatcher", hs::to_string(r.options.dispatcher)},
            {"routing", r.options.expert_load > 0 ? "expert-load" : std::string(hs::to_string(r.options.routing))},
            {"expert_load_factor", r.plan.expert_load_factor},
            {"expert_node_load_factor", r.plan.expert_node_load_factor},
            {"tp_comm_overlap", r.options.tp_comm_overlap},
            {"cross_entropy_fusion", r.options.cross_entropy_fusion},
            {"precision", hs::to_string(r.options.precision)},
            {"dispatch_fp8", r.options.dispatch_fp8},
            {"cuda_graphs", r.options.cuda_graphs}}},
          {"model_flops_per_step", r.model_flops},
          {"tp_comm_s", s.tp_comm_s},
          {"cp_comm_s", s.cp_comm_s},
          {"dp_comm_s", s.dp_comm_s},
          {"dp_exposed_s", s.dp_exposed_s},
          {"optimizer_s", s.optimizer_s},
          {"compute_busy_s", s.compute_busy_s},
          {"layer_compute_s", s.layer_compute_s},
          {"max_compute_busy_s", s.max_compute_busy_s},
          {"a2a_total_s", s.a2a_total_s},
          {"a2a_exposed_s", s.a2a_exposed_s},
          {"a2a_hidden_fraction", s.a2a_hidden_fraction},
          {"p2p_total_s", s.p2p_total_s},
          {"allreduce_s", s.allreduce_s},
          {"bubble_fraction", s.bubble_fraction},
          {"gpus", s.gpus},
          {"activities", s.activities},
          {"flows", s.flows},
          {"simulated_ranks", r.result.folded_ranks > 0 ? r.result.folded_ranks : s.gpus},
          {"a2a_model", r.result.a2a_model},
          {"schedule", r.plan.schedule},
          {"pattern", r.plan.pattern},
          {"model", r.model},
          {"platform", r.platform},
          {"nodes", r.plan.nodes.size()},
          {"wall_s", r.wall_s}};
}

std::string ms(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << s * 1e3 << " ms";
  return o.str();
}

std::string pct(double f) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << f * 100 << " %";
  return o.str();
}

std::string gib(double bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << bytes / kGiB << " GiB";
  return o.str();
}

}  // namespace ht::cli
