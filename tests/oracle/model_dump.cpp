// oracle_model_dump: the C++ half of the whole-model PyTorch oracle. For small patterns drawn by
// the verifier's engine generator (groups of any valid shape, MTP depths), with a fixed seed, it
// builds the engine's HybridModel in float32 and in float64, perturbs every parameter (so no norm
// weight keeps its init value of 1), runs one forward and backward on a random batch and writes
// one safetensors file per (pattern, dtype): the pattern, the configuration, tokens, targets,
// every parameter and gradient under its checkpoint key, and each term of the loss.
// tests/oracle/torch_model_oracle.py builds the same model from the pattern text alone, with its
// own parser and key rules, and compares loss terms and gradients.
//
//   oracle_model_dump <out_dir> [--cases N] [--seed S]
//                     [--check <python> <torch_model_oracle.py> [oracle options...]]
//   exit 77 (ctest SKIP) when <python> cannot import torch.
#include <rapidcheck.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "ht/engine/model.hpp"
#include "ht/engine/rng.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/verify/engine_gen.hpp"
#include "oracle_common.hpp"
#include "safetensors_dump.hpp"

namespace fs = std::filesystem;
using namespace ht::engine;
using ht::oracle::SafetensorsDump;

namespace {

constexpr int kB = 2, kT = 6;

template <class T>
void dump_model(const fs::path& dir, int index, const std::string& text, const ModelConfig& cfg, std::uint64_t seed) {
  const auto pattern = ht::patterns::parse(text);
  HybridModel<T> model(pattern, cfg, seed);
  Rng noise(seed, "oracle-perturbation");
  for (auto& p : model.parameters())
    for (auto& v : p.value->data) v += static_cast<T>(noise.normal() * 0.1);
  Batch batch{Tensor<int>({kB, kT}), Tensor<int>({kB, kT})};
  Rng data(seed, "oracle-batch");
  for (std::size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int>(data.uniform() * cfg.vocab_size) % cfg.vocab_size;
    batch.targets[i] = static_cast<int>(data.uniform() * cfg.vocab_size) % cfg.vocab_size;
  }
  model.zero_grad();
  const LossBreakdown loss = model.forward(batch);
  model.backward();

  SafetensorsDump st;
  const char* dtype = sizeof(T) == 4 ? "f32" : "f64";
  st.meta("pattern", text);
  st.meta("dtype", dtype);
  st.meta("config", ht::oracle::config_json(cfg));
  st.add("tokens", batch.tokens);
  st.add("targets", batch.targets);
  st.add_scalar("loss/total", loss.total);
  st.add_scalar("loss/lm", loss.lm);
  st.add_scalar("loss/aux", loss.aux);
  st.add_scalar("loss/z", loss.z);
  for (std::size_t d = 0; d < loss.mtp.size(); ++d) st.add_scalar("loss/mtp." + std::to_string(d), loss.mtp[d]);
  for (auto& p : model.parameters()) {
    st.add("param/" + p.key, *p.value);
    st.add("grad/" + p.key, *p.grad);
  }
  char name[32];
  std::snprintf(name, sizeof name, "model%02d.%s.safetensors", index, dtype);
  st.write(dir / name);
}

// Patterns of the engine generator from a fixed seed: any valid group, with MTP depths.
std::vector<std::string> oracle_patterns(int cases, std::uint64_t seed) {
  std::vector<std::string> out;
  const auto gen = ht::verify::gen::engine_pattern_with_mtp();
  for (int i = 0; i < cases; ++i) out.push_back(gen(rc::Random(seed + static_cast<std::uint64_t>(i)), 60).value());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  int cases = 16;
  std::uint64_t seed = 20261205;
  std::string python, script, extra;
  bool check = false, ok = !args.empty();
  for (std::size_t i = 1; ok && i < args.size(); ++i) {
    if (args[i] == "--cases" && i + 1 < args.size()) {
      const std::string& v = args[++i];
      ok = !v.empty() && v.size() <= 4 && v.find_first_not_of("0123456789") == std::string::npos;
      cases = ok ? std::stoi(v) : 0;
      ok = ok && cases > 0 && cases <= 1000;
    } else if (args[i] == "--seed" && i + 1 < args.size()) {
      const std::string& v = args[++i];
      ok = !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (ok) seed = std::stoull(v);
    } else if (args[i] == "--check" && i + 2 < args.size()) {
      check = true;
      python = args[i + 1];
      script = args[i + 2];
      for (i += 3; i < args.size(); ++i) extra += " \"" + args[i] + "\"";
    } else {
      ok = false;
    }
  }
  if (!ok) {
    std::cerr << "usage: oracle_model_dump <out_dir> [--cases N] [--seed S] "
                 "[--check <python> <torch_model_oracle.py> [oracle options...]]\n";
    return 2;
  }
  try {
    const fs::path dir(args[0]);
    fs::remove_all(dir);
    fs::create_directories(dir);
    const ModelConfig cfg = ht::oracle::oracle_config();
    const auto patterns = oracle_patterns(cases, seed);
    for (int i = 0; i < cases; ++i) {
      const auto& text = patterns[static_cast<std::size_t>(i)];
      dump_model<float>(dir, i, text, cfg, seed + static_cast<std::uint64_t>(i));
      dump_model<double>(dir, i, text, cfg, seed + static_cast<std::uint64_t>(i));
    }
    std::cout << "oracle_model_dump: " << cases << " patterns (seed " << seed << "), float32 and float64, in "
              << dir.string() << std::endl;
    if (check) return ht::oracle::run_oracle(python, script, dir, extra);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
