// Times one training step (forward, backward, AdamW) of a small hybrid model with the CPU engine
// and with a PyTorch reference of the same model (torch_train_step.py: the layer definitions of
// tests/oracle/torch_oracle.py composed by tests/engine/model_oracle.py, float32, one thread),
// on the same weights and batch; prints both, the ratio, fwd+bwd per layer type and peak RSS.
// Not a test: it never fails on timing.
// Usage: bench_engine_step [--steps N] [--pattern P] [--python PATH] [--no-torch]
#include <sys/resource.h>

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

#include "ht/engine/branch.hpp"
#include "ht/engine/checkpoint.hpp"
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

template <class F>
double time_ms(int reps, F&& f) {
  f();  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 3;
  std::string pattern = "M*GEM*G-";
  std::string python = "/usr/bin/python3";
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps" && i + 1 < argc) steps = std::stoi(argv[++i]);
    else if (a == "--pattern" && i + 1 < argc) pattern = argv[++i];
    else if (a == "--python" && i + 1 < argc) python = argv[++i];
    else if (a == "--no-torch") torch = false;
    else {
      std::cerr << "usage: bench_engine_step [--steps N] [--pattern P] [--python PATH] [--no-torch]\n";
      return 2;
    }
  }
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
  const double step_ms = time_ms(steps, [&] {
    model.zero_grad();
    const double loss = model.forward(batch).total;
    if (!have_first) first_loss = loss;
    have_first = true;
    model.backward();
    auto ps = model.parameters();
    adamw_step(AdamWConfig{}, state, ps);
  });

  // Per layer type: the residual branch alone, forward + backward on (B, T, C).
  std::map<char, double> layer_ms;
  Rng rng(3);
  Tensor<float> x({B, T, cfg.hidden}), dout({B, T, cfg.hidden});
  for (auto& v : x.data) v = static_cast<float>(rng.normal());
  for (auto& v : dout.data) v = static_cast<float>(rng.normal());
  for (char sym : std::string("M*G-E")) {
    Rng lr(7);
    auto branch = make_branch<float>(sym, cfg, lr, 1.f);
    Tensor<float> out, dx(x.shape);
    layer_ms[sym] = time_ms(steps, [&] {
      branch->forward(x, out);
      branch->backward(x, dout, dx);
    });
  }
  const double rss = peak_rss_mib();

  nlohmann::json ref;
  if (torch) {
    const std::string cmd = python + " '" + HT_TORCH_STEP_SCRIPT + "' '" + dir.string() + "' " + std::to_string(steps);
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    std::string text;
    if (pipe) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, pipe.get())) text += buf;
    }
    try {
      ref = nlohmann::json::parse(text);
    } catch (const std::exception&) {
      std::cerr << "PyTorch reference unavailable (" << cmd << " printed no JSON)\n";
    }
    std::filesystem::remove_all(dir);
  }

  std::cout << "hybrid training step: pattern " << pattern << ", hidden " << cfg.hidden << ", batch " << B
            << " x seq " << T << ", " << model.num_parameters() << " parameters, 1 thread\n";
  std::cout << std::fixed << std::setprecision(1);
  const bool have = ref.contains("step_ms");
  std::cout << "                      engine      pytorch    engine/pytorch\n";
  auto row = [&](const std::string& name, double mine, const char* key, const char* sub = nullptr) {
    std::cout << std::left << std::setw(20) << name << std::right << std::setw(9) << mine << " ms";
    double theirs = -1;
    if (have) theirs = sub ? ref[key].value(sub, -1.0) : ref.value(key, -1.0);
    if (theirs > 0)
      std::cout << std::setw(10) << theirs << " ms" << std::setw(12) << std::setprecision(2) << mine / theirs
                << std::setprecision(1);
    std::cout << "\n";
  };
  row("train step", step_ms, "step_ms");
  const std::map<char, std::string> names{{'M', "M mamba2"}, {'*', "* attention"}, {'G', "G gdn"},
                                          {'-', "- mlp"}, {'E', "E moe"}};
  for (auto [sym, ms] : layer_ms) row("  fwd+bwd " + names.at(sym), ms, "layer_ms", std::string(1, sym).c_str());
  std::cout << "peak RSS            " << std::setw(9) << rss << " MiB";
  if (have) std::cout << std::setw(10) << ref.value("peak_rss_mib", 0.0) << " MiB";
  std::cout << "\n";
  if (have)
    std::cout << "loss (same weights, first step): engine " << std::setprecision(5) << first_loss << ", pytorch "
              << ref.value("first_loss", 0.0) << "\n";
  std::cout << "PyTorch reference: tests/oracle layer definitions (per-step scans for M/G, every expert "
               "evaluated densely for E), float32, torch.set_num_threads(1).\n";
  return 0;
}
