// compare_executors (device_executor.hpp): the EP-overlap executor on a device against itself
// (overlap vs sequential, grouped vs flattened: bitwise) and against the CPU executor
// (exec::Executor, a second implementation of the same plan). Device-agnostic: the factory decides
// whether the GPU or the host emulation runs.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/patterns/pattern.hpp"

namespace ht::engine::cuda {
namespace {

constexpr int kBatch = 2, kSeq = 8, kRanks = 2, kMicrobatches = 3;

struct Outcome {
  std::vector<std::vector<double>> loss;
  exec::Owned owned;
};

// Loss and gradient difference of two runs: max |a - b| over every (rank, microbatch) loss and
// every owned gradient, whether all are bitwise equal, the largest |b| (the scale).
struct Diff {
  double max_abs = 0, scale = 0;
  bool bitwise = true;
  std::string first;
};
Diff diff(const Outcome& a, const Outcome& b) {
  Diff d;
  if (a.loss != b.loss) {
    d.bitwise = false;
    d.first = "loss";
  }
  for (std::size_t r = 0; r < a.loss.size() && r < b.loss.size(); ++r)
    for (std::size_t m = 0; m < a.loss[r].size() && m < b.loss[r].size(); ++m) {
      d.max_abs = std::max(d.max_abs, std::fabs(a.loss[r][m] - b.loss[r][m]));
      d.scale = std::max(d.scale, std::fabs(b.loss[r][m]));
    }
  if (a.loss.size() != b.loss.size()) d.max_abs = INFINITY;
  const exec::OwnedDiff g = exec::compare_owned(a.owned, b.owned, true);
  if (!g.bitwise && d.bitwise) d.first = g.missing.empty() ? g.first_differing : "missing " + g.missing;
  d.bitwise = d.bitwise && g.bitwise;
  d.max_abs = std::isnan(g.max_abs) ? INFINITY : std::max(d.max_abs, g.max_abs);
  d.scale = std::max(d.scale, g.max_ref);
  return d;
}

class Runner {
 public:
  Runner(const DeviceExecutorFactory& make, std::uint64_t seed) : make_(make), seed_(seed) {}

  // One step of `plan` on the device; the executor is kept so its parameters stay readable.
  Outcome device(const patterns::ParsedPattern& p, const schedule::Plan& plan) {
    device_.push_back(make_(p, cfg_, seed_, plan, {}));
    auto& ex = *device_.back();
    return {ex.step(batches()).loss, owned(ex)};
  }
  // The same step with the ranks over the fabric's devices, one process driving them.
  Outcome devices(std::unique_ptr<ThreadFabric> fabric, const patterns::ParsedPattern& p, const schedule::Plan& plan) {
    device_.push_back(make_multi_device_executor(make_, std::move(fabric), p, cfg_, seed_, plan));
    auto& ex = *device_.back();
    return {ex.step(batches()).loss, owned(ex)};
  }
  Outcome cpu(const patterns::ParsedPattern& p, const schedule::Plan& plan) {
    cpu_.push_back(std::make_unique<exec::Executor>(p, cfg_, seed_, plan));
    auto& ex = *cpu_.back();
    return {ex.step(batches()).loss, exec::owned(ex)};
  }
  schedule::Plan plan(const patterns::ParsedPattern& p, bool overlap, bool delay_wgrad) const {
    return exec::ep_plan(p, cfg_, kBatch, kSeq, kRanks, kMicrobatches, overlap, delay_wgrad);
  }
  const ModelConfig& cfg() const { return cfg_; }

 private:
  std::vector<std::vector<Batch>> batches() const {
    return exec::random_batches(kRanks, kMicrobatches, kBatch, kSeq, cfg_.vocab_size, seed_ + 1);
  }
  const DeviceExecutorFactory& make_;
  std::uint64_t seed_;
  ModelConfig cfg_ = model_check_config();
  std::vector<std::unique_ptr<DeviceExecutor>> device_;
  std::vector<std::unique_ptr<exec::Executor>> cpu_;
};

std::string plan_name(bool overlap, bool delay_wgrad) {
  return std::string(overlap ? "combined 1F1B" : "sequential") + (delay_wgrad ? ", delayed wgrad" : "");
}

ModelComparison bitwise_row(const std::string& pair, const std::string& config, const Diff& d) {
  std::string note = "EP " + std::to_string(kRanks) + ", " + std::to_string(kMicrobatches) +
                     " microbatches: every loss and owned gradient, bitwise required";
  if (!d.bitwise) note += "; first difference: " + d.first;
  return {pair, config, d.max_abs, d.bitwise, d.bitwise, note};
}

}  // namespace

std::vector<ModelComparison> compare_executors(const DeviceExecutorFactory& make, std::uint64_t seed,
                                               const FabricFactory& fabric) {
  Runner run(make, seed);
  std::vector<ModelComparison> rows;

  // Overlap against sequential, on the device.
  {
    const auto p = patterns::parse("M[*E]M[*E]-");
    const Outcome seq = run.device(p, run.plan(p, false, false));
    for (const bool delay : {false, true})
      rows.push_back(bitwise_row("device_overlap_vs_sequential", p.text + " " + plan_name(true, delay) + " vs sequential",
                                 diff(run.device(p, run.plan(p, true, delay)), seq)));
  }
  // Grouped against flattened, both overlapped, on the device.
  for (const auto& [grouped, flat] : std::vector<std::pair<std::string, std::string>>{{"M[*E]M[*E]-", "M*EM*E-"},
                                                                                     {"[G-]E[+E]", "G-E+E"}}) {
    const auto g = patterns::parse(grouped), f = patterns::parse(flat);
    rows.push_back(bitwise_row("device_executor_grouped_vs_flattened", grouped + " vs " + flat + ", combined 1F1B",
                               diff(run.device(g, run.plan(g, true, true)), run.device(f, run.plan(f, true, true)))));
  }
  // The ranks over two devices of one process against one device (when the fabric can be made).
  if (fabric) {
    const auto p = patterns::parse("M[*E]M[*E]-");
    const schedule::Plan plan = run.plan(p, true, true);
    if (auto f = fabric(kRanks))
      rows.push_back(bitwise_row("device_executor_devices_vs_one",
                                 p.text + " " + plan_name(true, true) + ": " + std::to_string(kRanks) +
                                     " devices of one process vs one device",
                                 diff(run.devices(std::move(f), p, plan), run.device(p, plan))));
  }
  // The CPU executor on the same plan: bitwise without SwiGLU; else within 4 K u scale.
  for (const auto& [text, overlap] : std::vector<std::pair<std::string, bool>>{{"[MG]*", false}, {"M[*E]-", true}}) {
    const auto p = patterns::parse(text);
    const schedule::Plan plan = run.plan(p, overlap, overlap);
    const Diff d = diff(run.device(p, plan), run.cpu(p, plan));
    const std::string flat = p.flattened_symbols();
    const bool swiglu = flat.find('-') != std::string::npos || flat.find('E') != std::string::npos;
    const ModelConfig& c = run.cfg();
    const int depth = (static_cast<int>(flat.size()) + 2) *
                          (c.hidden + c.ffn_hidden + c.num_experts * c.moe_ffn_hidden + kSeq + c.vocab_size) +
                      kRanks * kMicrobatches;
    const double bound = swiglu ? 4.0 * depth * 0x1p-24 * d.scale : 0.0;
    const bool pass = swiglu ? d.max_abs <= bound : d.bitwise;
    std::ostringstream note;
    note.precision(3);
    note << "EP " << kRanks << ", " << kMicrobatches << " microbatches, " << plan_name(overlap, overlap) << ": ";
    if (swiglu)
      note << "max |device - CPU| " << d.max_abs << (pass ? " <= " : " > ") << "4 K u scale " << bound << " (K " << depth
           << ", scale " << d.scale << "; SwiGLU's exp differs)";
    else
      note << "no SwiGLU layer, bitwise required" << (d.bitwise ? "" : "; first difference: " + d.first);
    rows.push_back({"cpu_vs_device_executor", text, d.max_abs, d.bitwise, pass, note.str()});
  }
  return rows;
}

}  // namespace ht::engine::cuda
