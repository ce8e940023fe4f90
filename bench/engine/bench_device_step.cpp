// Times forward + backward of a hybrid model on a device -- the GPU (--device cuda) or the host
// emulation of the device (--device host, which checks this program's logic without a GPU) --
// against a PyTorch eager peer of the same model on the same device, same weights and batch
// (torch_train_step.py with DEVICE; float32, TF32 off on both sides). Reports both times and the
// ratio, the full training step of each side (forward, backward, AdamW with global-norm clipping,
// all on the device on both sides), tokens/s, and the achieved GEMM
// TFLOP/s (2 m n k of every GEMM the device issued, per second of fwd+bwd) against the
// device's measured FP32 GEMM rate. Every figure is the fastest of --steps runs after a warm-up.
// Not a test: it never fails on timing. --json FILE also writes the figures as JSON.
//
// Usage: bench_device_step [--device cuda|host] [--pattern P] [--hidden C] [--seq T] [--batch B]
//                          [--steps N] [--python PATH] [--no-torch] [--json FILE]
// Defaults: cuda: the benchmark model, hidden 2048, sequence 4096, batch 1, 8 layers
// M*GEM*G- (M, *, G, -, E); host: the same pattern at hidden 128, sequence 64, batch 2.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "bench_common.hpp"
#include "ht/engine/checkpoint.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/data.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/pattern.hpp"

using namespace ht::engine;
using Clock = std::chrono::steady_clock;

namespace {

// Megatron-like proportions scaled from the hidden size: 128-wide attention heads (GQA 2:1),
// MLP 4C, 8 experts of width C (top-2), Mamba2 with expand 2, 64-wide heads, state 128, 8 groups,
// GDN with 128-wide heads; smaller hidden sizes shrink the head widths so every layer stays valid.
ModelConfig scaled_config(int c) {
  ModelConfig m;
  m.vocab_size = 256;
  m.hidden = c;
  m.head_dim = std::min(128, c / 2);
  m.num_heads = c / m.head_dim;
  m.num_kv_heads = std::max(1, m.num_heads / 2);
  m.ffn_hidden = 4 * c;
  m.num_experts = 8;
  m.moe_topk = 2;
  m.moe_ffn_hidden = c;
  m.moe_shared_ffn_hidden = 0;
  m.mamba_head_dim = std::min(64, c / 8);
  m.mamba_num_heads = 2 * c / m.mamba_head_dim;
  m.mamba_state_dim = std::min(128, c / 8);
  m.mamba_num_groups = m.mamba_num_heads % 8 == 0 ? 8 : 1;
  m.mamba_conv_kernel = 4;
  m.gdn_head_dim_qk = std::min(128, c / 2);
  m.gdn_head_dim_v = m.gdn_head_dim_qk;
  m.gdn_num_heads = c / m.gdn_head_dim_qk;
  m.gdn_num_v_heads = m.gdn_num_heads;
  m.gdn_conv_kernel = 4;
  return m;
}

int usage() {
  std::cerr << "usage: bench_device_step [--device cuda|host] [--pattern P] [--hidden C] [--seq T] [--batch B] "
               "[--steps N] [--python PATH] [--no-torch] [--json FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string device = "cuda", pattern = "M*GEM*G-", python = "/usr/bin/python3", json_out;
  int hidden = 0, seq = 0, batch = 0, steps = 3;
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--device" && more) device = argv[++i];
    else if (a == "--pattern" && more) pattern = argv[++i];
    else if (a == "--hidden" && more) hidden = std::stoi(argv[++i]);
    else if (a == "--seq" && more) seq = std::stoi(argv[++i]);
    else if (a == "--batch" && more) batch = std::stoi(argv[++i]);
    else if (a == "--steps" && more) steps = std::stoi(argv[++i]);
    else if (a == "--python" && more) python = argv[++i];
    else if (a == "--json" && more) json_out = argv[++i];
    else if (a == "--no-torch") torch = false;
    else return usage();
  }
  if (device != "cuda" && device != "host") return usage();
  const bool gpu = device == "cuda";
  if (hidden == 0) hidden = gpu ? 2048 : 128;
  if (seq == 0) seq = gpu ? 4096 : 64;
  if (batch == 0) batch = gpu ? 1 : 2;
  if (steps < 1 || hidden < 16 || hidden % 16 != 0 || seq < 1 || batch < 1) {
    std::cerr << "--steps, --seq and --batch must be >= 1 and --hidden a multiple of 16\n";
    return 2;
  }
  const ModelConfig cfg = scaled_config(hidden);
  HybridModel<float> model(ht::patterns::parse(pattern), cfg, 1);
  const Batch b = sample_batch(load_corpus(""), batch, seq, 1, 0);
  std::cerr << "bench_device_step: " << pattern << ", hidden " << hidden << ", " << batch << " x " << seq << ", "
            << model.num_parameters() << " parameters, on " << device << "\n";

  const auto dir = std::filesystem::temp_directory_path() / ("ht-bench-device-" + std::to_string(::getpid()));
  if (torch) {  // same weights and batch for the peer, before any update
    save_checkpoint((dir / "ckpt").string(), model, nullptr, 0, 1);
    Tensor<float> tok(b.tokens.shape), tgt(b.targets.shape);
    for (std::size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<float>(b.tokens[i]);
      tgt[i] = static_cast<float>(b.targets[i]);
    }
    write_safetensors((dir / "batch.safetensors").string(), {{"tokens", &tok}, {"targets", &tgt}});
  }

  // The peer first: the device's memory (and its block cache) is not held while it runs.
  nlohmann::json ref = nlohmann::json::object();
  if (torch) {
    const std::string cmd = "OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 " + python + " '" + HT_TORCH_STEP_SCRIPT + "' '" +
                            dir.string() + "' " + std::to_string(steps) + " 1 " + (gpu ? "cuda" : "cpu");
    ref = ht::bench::run_json_command(cmd);
    std::filesystem::remove_all(dir);
  }
  // One rank of the device executor on the one-rank sequential plan: its rank draws the weights
  // `model` has (the same seed), so the peer starts from the same ones.
  const auto parsed = ht::patterns::parse(pattern);
  auto ex = (gpu ? cuda::make_cuda_executor : cuda::make_host_executor)(
      parsed, cfg, 1, exec::ep_plan(parsed, cfg, batch, seq, 1, 1, false, false), {});
  double first_loss = -1, step_flops = 0;
  auto fwdbwd = [&] {  // step() returns once the device is done (its timeline waits for its events)
    ex->zero_grad();
    const exec::StepResult r = ex->step({{b}});
    if (first_loss < 0) first_loss = r.total;  // before any update: the peer starts from these weights
    step_flops = 0;
    for (const auto& s : r.timeline.spans)
      if (const auto it = s.args.find("gemm_flops"); it != s.args.end()) step_flops += std::stod(it->second);
  };
  fwdbwd();
  const double fwdbwd_ms = ht::bench::fastest_ms(steps, fwdbwd);
  const double step_ms = ht::bench::fastest_ms(steps, [&] {
    fwdbwd();
    ex->optimizer_step(AdamWConfig{});  // AdamW on the device; it waits for the device
  });
  const int gemm_n = gpu ? 8192 : 256;
  const double peak = gpu ? cuda::measure_gemm_tflops_cuda(gemm_n, 5) : cuda::measure_gemm_tflops_host(gemm_n, 3);

  const double tokens = static_cast<double>(batch) * seq;
  const double achieved = step_flops / (fwdbwd_ms * 1e-3) / 1e12;
  const double ref_fb = ref.value("fwdbwd_ms", -1.0), ref_step = ref.value("step_ms", -1.0);
  nlohmann::json out = {{"device", ex->device()},
                        {"pattern", pattern},
                        {"hidden", hidden},
                        {"seq", seq},
                        {"batch", batch},
                        {"parameters", model.num_parameters()},
                        {"fwdbwd_ms", fwdbwd_ms},
                        {"step_ms", step_ms},
                        {"gemm_gflop_per_fwdbwd", step_flops / 1e9},
                        {"achieved_gemm_tflops", achieved},
                        {"measured_gemm_tflops", peak},
                        {"first_loss", first_loss},
                        {"pytorch", ref}};
  if (ref_fb > 0) out["ratio_fwdbwd"] = fwdbwd_ms / ref_fb;
  if (ref_step > 0) out["ratio_step"] = step_ms / ref_step;
  std::cout << "device step: " << pattern << " on " << ex->device() << ", hidden " << hidden << ", " << batch << " x "
            << seq << ", " << model.num_parameters() << " parameters, float32 (no TF32), fastest of " << steps << "\n"
            << std::fixed << std::setprecision(1) << "                          engine      pytorch   engine/pytorch\n";
  auto row = [&](const std::string& name, double mine, double theirs) {
    std::cout << std::left << std::setw(22) << name << std::right << std::setw(10) << mine << " ms";
    if (theirs > 0) std::cout << std::setw(10) << theirs << " ms" << std::setw(12) << std::setprecision(2) << mine / theirs;
    std::cout << std::setprecision(1) << "\n";
  };
  row("forward + backward", fwdbwd_ms, ref_fb);
  row("training step", step_ms, ref_step);
  std::cout << std::left << std::setw(22) << "tokens/s (fwd+bwd)" << std::right << std::setw(10) << std::setprecision(0)
            << tokens / fwdbwd_ms * 1e3;
  if (ref_fb > 0) std::cout << std::setw(13) << tokens / ref_fb * 1e3;
  std::cout << "\n" << std::setprecision(2) << "GEMM TFLOP/s: achieved " << achieved << " of a measured " << peak
            << " (" << std::setprecision(1) << 100.0 * achieved / peak << " %; " << gemm_n << "^3 FP32 GEMM)\n";
  if (ref.contains("first_loss"))
    std::cout << std::setprecision(5) << "loss (same weights): engine " << first_loss << ", pytorch "
              << ref["first_loss"].get<double>() << "\n";
  std::cout << std::defaultfloat;
  if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_device_step: " << e.what() << "\n";
  return 2;
}
