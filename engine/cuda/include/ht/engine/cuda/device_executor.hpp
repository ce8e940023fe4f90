// The EP-overlap executor on one device (dev/executor.hpp) behind a plain C++ interface, so the CLI
// and tests use it without CUDA headers: a schedule::Plan run by EP ranks sharing the device, each
// rank's compute on a stream of its own, the all-to-alls and the gradient all-reduce on a comm
// stream (device-side copies between the ranks' buffers). Two devices: the GPU
// (CUDA builds) and the host emulation, which runs the same code on the CPU.
//
// Several processes (mpirun) each run a block of the ranks through a ProcessGroup: NCCL between
// GPUs, MPI on the host emulation; the results equal one process's bit for bit.
//
// Scope: PP = 1, VPP = 1, EP dividing DP (DP = EP across processes), MTP depths on the sequential
// schedule, up to 8 ranks; other plans are refused with an EngineError(BadConfig) that names the
// reason.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/cuda/device_checks.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"

namespace ht::engine::cuda {

class DeviceExecutor {
 public:
  virtual ~DeviceExecutor() = default;
  virtual std::string device() const = 0;
  virtual int ranks() const = 0;
  // Whether rank r runs in this process (with a process group, a block of ranks per process; every
  // rank without one). parameters() answers for those only; step() returns every rank's losses.
  virtual bool local(int rank) const = 0;
  virtual const schedule::Plan& plan() const = 0;
  // As exec::Executor::step: batches[rank][microbatch]; gradients accumulate; the timeline has one
  // device per rank (streams compute 0, comm 1) on the device's clock, spans named as plan nodes.
  virtual exec::StepResult step(const std::vector<std::vector<Batch>>& batches) = 0;
  virtual void zero_grad() = 0;
  // AdamW with global-norm clipping on every rank, on the device (exec::Executor::optimizer_step's
  // order of the norm: on the host emulation its bits); returns the norm before clipping.
  virtual double optimizer_step(const AdamWConfig& cfg) = 0;
  // The parameters rank r holds (non-expert ones and its experts) with values and gradients
  // downloaded; whether rank r owns `canonical`.
  virtual std::vector<ParamRef<float>> parameters(int rank) = 0;
  virtual bool owns(int rank, const std::string& canonical) const = 0;
  // For checkpoints: rank r's AdamW state (its moments downloaded, by canonical name), and rank r
  // taking the values its parameters() tensors now hold (uploaded) with `state`'s moments and step.
  virtual AdamWState<float> optimizer_state(int rank) = 0;
  virtual void restore(int rank, const AdamWState<float>& state) = 0;
};

struct DeviceExecutorOptions {
  // Test-only fault injection: the combine's backward does not pass the gradient to the MoE
  // residual (as exec::ExecutorOptions::test_drop_residual_grad). Equivalence checks must catch it.
  bool test_drop_residual_grad = false;
  // Test-only: each rank's first W node runs twice, never, or before its backward
  // (exec/weight_steps.hpp, as exec::ExecutorOptions::test_weight_fault). The step must fail.
  exec::WeightFault test_weight_fault = exec::WeightFault::None;
  // The processes that share the ranks (process_group.hpp; not owned): each runs a contiguous block
  // of them. None: every rank runs in this process.
  ProcessGroup* group = nullptr;
};

// ", process p of P (name)" with a process group, else nothing: the device names' suffix.
inline std::string process_note(const DeviceExecutorOptions& o) {
  if (!o.group) return {};
  return ", process " + std::to_string(o.group->process()) + " of " + std::to_string(o.group->processes()) + " (" +
         o.group->name() + ")";
}

std::unique_ptr<DeviceExecutor> make_host_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan,
                                                   DeviceExecutorOptions options = {});
// Throws std::runtime_error without a usable GPU or CUDA backend.
std::unique_ptr<DeviceExecutor> make_cuda_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan,
                                                   DeviceExecutorOptions options = {});
using DeviceExecutorFactory = std::function<std::unique_ptr<DeviceExecutor>(
    const patterns::ParsedPattern&, const ModelConfig&, std::uint64_t, schedule::Plan, DeviceExecutorOptions)>;

// What compare_owned reads: the ranks of this process only (the others hold nothing here).
inline exec::Owned owned(DeviceExecutor& e) {
  return {e.ranks(), [&e](int r) { return e.local(r) ? e.parameters(r) : std::vector<ParamRef<float>>{}; },
          [&e](int r, const std::string& name) { return e.local(r) && e.owns(r, name); },
          [&e](int r) { return e.local(r) ? e.optimizer_state(r) : AdamWState<float>{}; },
          [&e](int r, const AdamWState<float>& s) {
            if (e.local(r)) e.restore(r, s);
          }};
}

// One process driving fabric->size() devices (GPUs 0 .. D-1 with make_nccl_fabric and
// make_cuda_executor; threads of the host emulation with make_host_fabric and make_host_executor):
// a worker thread per device runs the ranks of its block ([i n/D, (i+1) n/D)) with `make` and the
// device's endpoint of the fabric; the result answers for every rank (local() is always true), its
// step's losses are the whole step's and its timeline joins the devices' ranks (each device on its
// own clock). Equal to one device's run bit for bit (the executor's process split).
std::unique_ptr<DeviceExecutor> make_multi_device_executor(const DeviceExecutorFactory& make,
                                                           std::unique_ptr<ThreadFabric> fabric,
                                                           const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                           std::uint64_t seed, schedule::Plan plan,
                                                           DeviceExecutorOptions options = {});

// Whole models on one rank of a device (`verify --backend cuda|cuda-host`): for each pattern pair,
// grouped vs flattened on the device (device_grouped_vs_flattened, bitwise), and the device
// against the CPU HybridModel (cpu_vs_device_model: bitwise where every layer is; else within the
// float32 bound of layer_compare.hpp, with a float64 HybridModel as the oracle). `make` decides
// whether the GPU or the host emulation runs.
std::vector<ModelComparison> compare_models(const DeviceExecutorFactory& make, std::uint64_t seed);
// One cpu_vs_device_model row: `p` with `cfg` and weights from `seed` on the device and on the CPU,
// one forward and backward of `batch`. max_abs_diff is against the CPU float32 model (0: bitwise).
ModelComparison compare_device_to_cpu(const DeviceExecutorFactory& make, const patterns::ParsedPattern& p,
                                      const ModelConfig& cfg, const Batch& batch, std::uint64_t seed);

// The executor rows of `verify --backend cuda|cuda-host` (ModelComparison rows):
//  device_overlap_vs_sequential    EP 2, 3 microbatches, combined 1F1B with and without delayed
//                                  wgrad against the sequential plan: losses and gradients bitwise;
//  device_executor_grouped_vs_flattened  overlapped plans of a grouped pattern and its flattened
//                                  form: bitwise;
//  device_executor_devices_vs_one  the EP 2 ranks over two devices of one process (a thread each,
//                                  the fabric's transfers) against one device: bitwise; only when
//                                  `fabric` is given and makes one (it returns null to skip);
//  cpu_vs_device_executor          the device executor against exec::Executor on the same plan:
//                                  bitwise without SwiGLU layers ('-', 'E'); with them within
//                                  4 K u scale (both float32 runs are within K u scale of the exact
//                                  sums at first order, K the summation depth of compare_models
//                                  plus the ranks x microbatches a gradient adds, u = 2^-24).
using FabricFactory = std::function<std::unique_ptr<ThreadFabric>(int devices)>;
std::vector<ModelComparison> compare_executors(const DeviceExecutorFactory& make, std::uint64_t seed,
                                               const FabricFactory& fabric = {});

}  // namespace ht::engine::cuda
