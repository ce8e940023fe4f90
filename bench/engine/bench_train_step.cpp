// Times one training step (forward, backward, AdamW) of a small hybrid model with the CPU engine
// and with a PyTorch eager peer of the same model (torch_train_step.py: tests/oracle's layer
// definitions composed by tests/engine/model_oracle.py, with the recurrences, MoE and attention
// swapped for the fastest eager forms of the same math), float32, on the same weights and batch
// and the same thread count; prints both, the ratio, fwd+bwd per layer type, tokens/s, peak RSS
// and the BLAS each side uses. Every figure is the fastest of --steps timed runs after a warm-up,
// over --rounds rounds that alternate engine and PyTorch (defaults 5 and 2).
// Not a test: it never fails on timing.
//
// Run (one command, from the repository root; a Release build with HT_MODULES including engine):
//   cmake --build build-bench --target bench_engine_step && build-bench/bench/engine/bench_engine_step
// Usage: bench_engine_step [--steps N] [--rounds R] [--pattern P] [--python PATH] [--no-torch]
// Threads: 1 on both sides. The engine computes on one thread per rank (EIGEN_DONT_PARALLELIZE,
// OpenBLAS pinned to 1 in engine/src/cpu/gemm.cpp); the peer gets torch.set_num_threads(1) and
// OPENBLAS_NUM_THREADS=1. The peer's BLAS is Debian's libblas.so.3 alternative: the bench prints
// the library mapped into the Python process; with the reference BLAS (not libopenblas0-pthread)
// the peer is far from its best and the bench says so.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "bench_common.hpp"
#include "ht/engine/branch.hpp"
#include "ht/engine/checkpoint.hpp"
#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/data.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/pattern.hpp"

using namespace ht::engine;
using Clock = std::chrono::steady_clock;

namespace {

ModelConfig bench_config() {
  ModelConfig c;
  c.vocab_size = 256;
  c.hidden = 256;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 32;
  c.ffn_hidden = 512;
  c.num_experts = 8;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 256;
  c.mamba_num_heads = 16;  // d_inner = 512 (expand 2)
  c.mamba_head_dim = 32;
  c.mamba_state_dim = 16;
  c.mamba_num_groups = 1;
  c.mamba_conv_kernel = 4;
  c.gdn_num_heads = 4;
  c.gdn_num_v_heads = 4;
  c.gdn_head_dim_qk = 64;
  c.gdn_head_dim_v = 64;
  return c;
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  int rounds = 2;
  std::string pattern = "M*GEM*G-";
  std::string python = "/usr/bin/python3";
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::stoi(argv[++i]);
    else if (a == "--pattern" && i + 1 < argc) pattern = argv[++i];
    else if (a == "--python" && i + 1 < argc) python = argv[++i];
    else if (a == "--no-torch") torch = false;
    else {
      std::cerr << "usage: bench_engine_step [--steps N] [--rounds R] [--pattern P] [--python PATH] [--no-torch]\n";
      return 2;
    }
  }
  if (steps < 1 || rounds < 1) {
    std::cerr << "--steps and --rounds must be >= 1\n";
    return 2;
  }
  constexpr int kThreads = 1;
  const int B = 4, T = 256;
  const ModelConfig cfg = bench_config();
  HybridModel<float> model(ht::patterns::parse(pattern), cfg, 1);
  const TextCorpus corpus = load_corpus("");
  const Batch batch = sample_batch(corpus, B, T, 1, 0);

  // Same weights and batch for the PyTorch side, written before the first update.
  const auto dir = std::filesystem::temp_directory_path() / ("ht-bench-engine-" + std::to_string(::getpid()));
  if (torch) {
    save_checkpoint((dir / "ckpt").string(), model, nullptr, 0, 1);
    Tensor<float> tok(batch.tokens.shape), tgt(batch.targets.shape);
    for (std::size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<float>(batch.tokens[i]);
      tgt[i] = static_cast<float>(batch.targets[i]);
    }
    write_safetensors((dir / "batch.safetensors").string(), {{"tokens", &tok}, {"targets", &tgt}});
  }

  AdamWState<float> state;
  double first_loss = 0;
  bool have_first = false;
  auto engine_step = [&] {
    model.zero_grad();
    const double loss = model.forward(batch).total;
    if (!have_first) first_loss = loss;
    have_first = true;
    model.backward();
    auto ps = model.parameters();
    adamw_step(AdamWConfig{}, state, ps);
  };
  Rng rng(3);
  Tensor<float> x({B, T, cfg.hidden}), dout({B, T, cfg.hidden});
  for (auto& v : x.data) v = static_cast<float>(rng.normal());
  for (auto& v : dout.data) v = static_cast<float>(rng.normal());
  const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(kThreads) + " OMP_NUM_THREADS=" +
                          std::to_string(kThreads) + " " + python + " '" + HT_TORCH_STEP_SCRIPT + "' '" +
                          dir.string() + "' " + std::to_string(steps) + " " + std::to_string(kThreads);
  auto run_torch = [&] { return ht::bench::run_json_command(cmd); };

  // Rounds alternate the two sides (engine, PyTorch, engine, ...) and each figure keeps its
  // fastest round, so a burst of load from elsewhere hits both sides alike.
  double step_ms = 0;
  std::map<char, double> layer_ms;
  nlohmann::json ref;
  auto keep_min = [](double& best, double v, bool first) { best = first ? v : std::min(best, v); };
  for (int round = 0; round < rounds; ++round) {
    keep_min(step_ms, ht::bench::fastest_ms(steps, engine_step), round == 0);
    // Per layer type: the residual branch alone, forward + backward on (B, T, C).
    for (char sym : std::string("M*G-E")) {
      Rng lr(7);
      auto branch = make_branch<float>(sym, cfg, lr, 1.f);
      Tensor<float> out, dx(x.shape);
      keep_min(layer_ms[sym], ht::bench::fastest_ms(steps, [&] {
                 branch->forward(x, out);
                 branch->backward(x, dout, dx);
               }),
               round == 0);
    }
    if (!torch) continue;
    nlohmann::json r = run_torch();
    if (!r.contains("step_ms")) break;
    if (!ref.contains("step_ms")) {
      ref = r;
      continue;
    }
    ref["step_ms"] = std::min(ref["step_ms"].get<double>(), r["step_ms"].get<double>());
    for (auto& [k, v] : ref["layer_ms"].items()) v = std::min(v.get<double>(), r["layer_ms"][k].get<double>());
    ref["peak_rss_mib"] = std::max(ref["peak_rss_mib"].get<double>(), r["peak_rss_mib"].get<double>());
  }
  if (torch) std::filesystem::remove_all(dir);
  const double rss = peak_rss_mib();

  std::cout << "hybrid training step: pattern " << pattern << ", hidden " << cfg.hidden << ", batch " << B
            << " x seq " << T << ", " << model.num_parameters() << " parameters, float32, fastest of " << steps
            << " runs x " << rounds << " alternating rounds\n";
  const bool have = ref.contains("step_ms");
  std::cout << "threads: engine " << kThreads;
  if (have) std::cout << ", pytorch " << ref.value("threads", 0);
  std::cout << "\nBLAS engine:  " << cpu::gemm_kernels() << "\n";
  if (have) {
    const auto& bl = ref["blas"];
    std::string loaded;
    for (const auto& l : bl.value("loaded", nlohmann::json::array())) loaded += (loaded.empty() ? "" : ", ") + l.get<std::string>();
    std::cout << "BLAS pytorch: torch " << bl.value("torch", "?") << " built with " << bl.value("built_with", "?")
              << ", loaded " << bl.value("kind", "?") << " (" << loaded << ")";
    if (bl.contains("openblas_threads") && !bl["openblas_threads"].is_null())
      std::cout << ", OpenBLAS threads " << bl["openblas_threads"].get<int>();
    std::cout << "\n";
    if (bl.value("kind", "") != "OpenBLAS")
      std::cout << "WARNING: PyTorch is not on OpenBLAS, so it is far from its best (apt install "
                   "libopenblas0-pthread; update-alternatives --config libblas.so.3-x86_64-linux-gnu)\n";
  }
  std::cout << std::fixed << std::setprecision(1);
  std::cout << "                         engine        pytorch   engine/pytorch\n";
  auto row = [&](const std::string& name, double mine, double theirs) {
    std::cout << std::left << std::setw(22) << name << std::right << std::setw(9) << mine << " ms";
    if (theirs > 0)
      std::cout << std::setw(12) << theirs << " ms" << std::setw(14) << std::setprecision(2) << mine / theirs
                << std::setprecision(1);
    std::cout << "\n";
  };
  const double ref_step = have ? ref.value("step_ms", -1.0) : -1.0;
  row("train step", step_ms, ref_step);
  const std::map<char, std::string> names{{'M', "M mamba2"}, {'*', "* attention"}, {'G', "G gdn"},
                                          {'-', "- mlp"}, {'E', "E moe"}};
  for (char sym : std::string("M*G-E")) {
    const std::string key(1, sym);
    const double theirs = have && ref["layer_ms"].contains(key) ? ref["layer_ms"][key].get<double>() : -1.0;
    row("  fwd+bwd " + names.at(sym), layer_ms.at(sym), theirs);
  }
  const double tokens = static_cast<double>(B) * T;
  std::cout << std::left << std::setw(22) << "tokens/s (train step)" << std::right << std::setw(9)
            << tokens / step_ms * 1000.0 << "   ";
  if (ref_step > 0) std::cout << std::setw(12) << tokens / ref_step * 1000.0;
  std::cout << "\n";
  std::cout << std::left << std::setw(22) << "peak RSS" << std::right << std::setw(9) << rss << " MiB";
  if (have) std::cout << std::setw(12) << ref.value("peak_rss_mib", 0.0) << " MiB";
  std::cout << "\n";
  if (have) {
    std::cout << "loss (same weights, first step): engine " << std::setprecision(5) << first_loss << ", pytorch "
              << ref.value("first_loss", 0.0) << "\n";
    std::cout << "peer layers vs tests/oracle layers on the bench input (rel. error):";
    for (const auto& [sym, err] : ref["peer_check"].items())
      std::cout << " " << sym << " " << std::scientific << std::setprecision(1) << err.get<double>();
    std::cout << std::fixed << "\n";
  }
  return 0;
}
