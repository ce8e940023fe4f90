// A HybridModel<float> mirrored on a device: the device model (dev/model.hpp) behind a plain C++
// interface, so the CLI and tests use it without CUDA headers. Two devices: the GPU (CUDA
// backend builds only) and the host emulation of the device, which runs the same layer code on
// the CPU and is how everything above the CUDA policy is tested without a GPU.
//
// The host model owns the parameter list, the checkpoints and (between downloads) the optimizer
// state. A step is zero_grad, forward, backward, then either adamw_step on the device, or
// download_grads, an optimizer step on the host and upload_params.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/schedule/plan.hpp"
#include "ht/traces/timeline.hpp"

namespace ht::engine::cuda {

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual std::string device() const = 0;  // "cuda:<name>" or "host emulation"
  virtual LossBreakdown forward(const Batch& batch) = 0;
  virtual void backward() = 0;
  virtual void zero_grad() = 0;
  virtual void download_grads() = 0;
  virtual void upload_params() = 0;
  virtual void download_params() = 0;
  // AdamW on the device (optimizer.cpp's update; moments kept on the device): returns the global
  // gradient norm before clipping and advances state.step. download_optimizer_state() copies the
  // moments into `state` (for a checkpoint), upload_optimizer_state() sends a resumed state.
  virtual double adamw_step(const AdamWConfig& cfg, AdamWState<float>& state) = 0;
  virtual void download_optimizer_state(AdamWState<float>& state) const = 0;
  virtual void upload_optimizer_state(const AdamWState<float>& state) = 0;
  // Timing of the slot pieces of the next forward and backward (pre_process, pre_dispatch, mlp,
  // combine, post_process), on the device's clock (CUDA events on the GPU); MTP depths are not
  // traced yet (forward throws EngineError). take_trace() returns them and starts over.
  struct Span {
    std::string slot;
    char phase = 'F';  // 'F' forward, 'B' backward (input and weight gradients)
    int layer = -1;    // logical layer; -1 for pre/post-process
    double start_s = 0, duration_s = 0;
  };
  virtual void set_tracing(bool on) = 0;
  virtual std::vector<Span> take_trace() = 0;
  // Waits until the device has finished everything issued (for timing).
  virtual void synchronize() = 0;
  // 2 m n k summed over every GEMM this device issued so far (all models on it).
  virtual double gemm_flops() const = 0;
};

// The device's FP32 GEMM rate (pedantic, no TF32) on an n x n x n product, best of `reps`, in
// TFLOP/s: what a model's achieved rate is measured against.
double measure_gemm_tflops_host(int n, int reps);
double measure_gemm_tflops_cuda(int n, int reps);  // throws without a usable GPU

// A traced step as a timeline of the one-rank sequential plan it ran (EP 1, PP 1, one
// microbatch): every span named and argued as that plan's node (schedule/node_args.hpp), so
// `hybrid-twin calibrate` fits the twin's compute costs from it. Throws EngineError when a span
// has no node in the plan.
traces::Timeline device_timeline(const std::vector<DeviceModel::Span>& spans, const schedule::Plan& plan);

using DeviceModelFactory = std::function<std::unique_ptr<DeviceModel>(HybridModel<float>&)>;

std::unique_ptr<DeviceModel> make_host_device_model(HybridModel<float>& host);
// Throws std::runtime_error without a usable GPU or without the CUDA backend in this build.
std::unique_ptr<DeviceModel> make_cuda_device_model(HybridModel<float>& host);

// Whole-model checks on a device, for `verify --backend cuda|cuda-host`: for each pattern pair,
// grouped vs flattened on the device (bitwise), and the device against the CPU HybridModel
// (bitwise where every layer is; else within the float32 bound of layer_compare.hpp, with a
// float64 HybridModel as the oracle).
struct ModelComparison {
  std::string pair;     // device_grouped_vs_flattened | cpu_vs_device_model
  std::string config;   // the pattern(s)
  double max_abs_diff = 0;
  bool bitwise = false;
  bool pass = false;
  std::string note;
};
std::vector<ModelComparison> compare_models(const DeviceModelFactory& make, std::uint64_t seed);
// The small model compare_models runs (and the device model tests): GQA 2:1, a window, top-2 of 4
// experts with a shared expert, Mamba2 with 2 groups, GDN with 2 value heads per q/k head, MLA
// with low-rank q.
ModelConfig model_check_config();
// One cpu_vs_device_model row: `p` with `cfg` and weights from `seed` on the device and on the CPU,
// one forward and backward of `batch`. max_abs_diff is against the CPU float32 model (0: bitwise).
ModelComparison compare_device_to_cpu(const DeviceModelFactory& make, const patterns::ParsedPattern& p,
                                      const ModelConfig& cfg, const Batch& batch, std::uint64_t seed);

}  // namespace ht::engine::cuda
