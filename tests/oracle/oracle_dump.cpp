// oracle_dump: the C++ half of the PyTorch autograd oracle (DESIGN.md "Engine numerics"; the
// llm.c habit of judging the reference engine against a PyTorch dump). For every layer kind it
// builds deterministic weights and inputs in float64, runs the engine's forward and hand-written
// backward in float32 AND in float64 on the same (rounded) values, and writes one safetensors
// file per (layer, dtype) holding weights, input, upstream gradient, the engine's output and
// every gradient. tests/oracle/torch_oracle.py reads them, recomputes everything with autograd
// and compares.
//
//   oracle_dump <out_dir>                              write the dumps only
//   oracle_dump <out_dir> --check <python> <script>    write, then run the oracle: exit 77 (ctest
//                                                      SKIP) when <python> cannot import torch
//   --corrupt (before --check)                         plant a 1e-4 relative error in one
//                                                      gradient entry of the float32 Mamba2 dump,
//                                                      so a test can show the oracle fails on it
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ht/engine/config.hpp"
#include "ht/engine/layers/attention.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/embedding.hpp"
#include "ht/engine/layers/gdn.hpp"
#include "ht/engine/layers/mamba2.hpp"
#include "ht/engine/layers/mla.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/layers/swiglu.hpp"
#include "ht/engine/rng.hpp"
#include "oracle_common.hpp"
#include "safetensors_dump.hpp"

namespace fs = std::filesystem;
using namespace ht::engine;
using ht::oracle::SafetensorsDump;
using ht::oracle::config_json;
using ht::oracle::oracle_config;
using ht::oracle::run_oracle;

namespace {

constexpr int kB = 2, kT = 7;

template <class T>
const char* dtype_tag() {
  return sizeof(T) == 4 ? "f32" : "f64";
}

template <class T>
Tensor<T> cast(const Tensor<double>& t) {
  Tensor<T> r(t.shape);
  for (std::size_t i = 0; i < t.size(); ++i) r[i] = static_cast<T>(t[i]);
  return r;
}

Tensor<double> normal(std::vector<int> shape, Rng& rng, double scale = 1.0) {
  Tensor<double> t(std::move(shape));
  for (auto& v : t.data) v = rng.normal() * scale;
  return t;
}

// Copies the values of src (float64) into dst (float32 or float64) tensor by tensor, in visit
// order; dst must already have its structure (from the layer's init).
template <class PT, class PD>
void cast_params(PT& dst, PD& src) {
  std::vector<const Tensor<double>*> from;
  PD::visit(src, [&](auto&&, Tensor<double>& t) { from.push_back(&t); });
  std::size_t i = 0;
  PT::visit(dst, [&]<class E>(auto&&, Tensor<E>& t) { t = cast<E>(*from.at(i++)); });
}

template <class T>
T max_abs(const Tensor<T>& t) {
  T m = 0;
  for (T v : t.data) m = std::max(m, std::abs(v));
  return m;
}

// Gradient buffers shaped like p, zeroed.
template <class P>
P zeros_like(const P& p) {
  P g = p;
  P::visit(g, [](auto&&, auto& t) { t.zero(); });
  return g;
}

// Adds normal noise to every parameter so that no weight keeps a structured init value (norm
// weights of 1, D of 1), which could hide a transposed or missing term.
template <class P>
void perturb(P& p, Rng& rng, double scale) {
  P::visit(p, [&](auto&&, Tensor<double>& t) {
    for (auto& v : t.data) v += rng.normal() * scale;
  });
}

template <class P>
void add_params(SafetensorsDump& st, const std::string& prefix, P& p) {
  P::visit(p, [&](auto&& name, auto& t) { st.add(prefix + std::string(name), t); });
}

struct Dumper {
  fs::path dir;
  ModelConfig cfg;
  bool corrupt = false;
  int files = 0;

  SafetensorsDump start(const std::string& layer, const char* dtype) const {
    SafetensorsDump st;
    st.meta("layer", layer);
    st.meta("dtype", dtype);
    st.meta("config", config_json(cfg));
    return st;
  }
  void finish(const SafetensorsDump& st, const std::string& layer, const char* dtype) {
    if (corrupt && layer != "mamba2") return;  // the planted-error run needs only that dump
    st.write(dir / (layer + "." + dtype + ".safetensors"));
    ++files;
  }

  // A branch with the engine's layer convention: fwd(p, x, out) and bwd(p, x, dout, dx, grads).
  template <class T, class PD, class PT, class Fwd, class Bwd>
  void branch(const std::string& layer, PD& pd, PT pt, const Tensor<double>& xd,
              const Tensor<double>& doutd, Fwd fwd, Bwd bwd,
              const std::vector<std::pair<std::string, std::string>>& extra_meta = {}) {
    cast_params(pt, pd);
    Tensor<T> x = cast<T>(xd), dout = cast<T>(doutd), out;
    auto scalars = fwd(pt, x, out);
    PT grads = zeros_like(pt);
    Tensor<T> dx(x.shape);
    bwd(pt, x, dout, dx, grads);
    if (corrupt && layer == "mamba2" && sizeof(T) == 4) dx[dx.size() / 2] += T(1e-4) * max_abs(dx);
    SafetensorsDump st = start(layer, dtype_tag<T>());
    for (const auto& [k, v] : extra_meta) st.meta(k, v);
    add_params(st, "param/", pt);
    st.add("input", x);
    st.add("dout", dout);
    st.add("out", out);
    for (const auto& [name, value] : scalars) st.add_scalar(name, value);
    st.add("grad/input", dx);
    add_params(st, "grad/", grads);
    finish(st, layer, dtype_tag<T>());
  }
};

using NoScalars = std::vector<std::pair<std::string, double>>;

template <class T>
void dump_mixers(Dumper& d, std::uint64_t seed) {
  const ModelConfig& cfg = d.cfg;
  {
    Rng rng(seed + 1);
    Mamba2Params<double> pd;
    mamba2_init(pd, cfg, rng);
    perturb(pd, rng, 0.3);
    for (auto& v : pd.dt_bias.data) v = rng.uniform(-1.0, 1.0);  // dt of order 1
    for (auto& v : pd.A_log.data) v = rng.uniform(-1.0, 1.0);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    Mamba2Params<T> pt;
    mamba2_init(pt, cfg, rng);
    Mamba2Cache<T> cache;
    d.branch<T>(
        "mamba2", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          mamba2_forward(cfg, p, in, out, cache);
          return NoScalars{};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          mamba2_backward(cfg, p, cache, in, dy, dx, g);
        });
  }
  {
    Rng rng(seed + 2);
    GdnParams<double> pd;
    gdn_init(pd, cfg, rng);
    perturb(pd, rng, 0.3);
    for (auto& v : pd.dt_bias.data) v = rng.uniform(-1.0, 1.0);
    for (auto& v : pd.A_log.data) v = rng.uniform(-1.5, 0.5);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    GdnParams<T> pt;
    gdn_init(pt, cfg, rng);
    GdnCache<T> cache;
    d.branch<T>(
        "gdn", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          gdn_forward(cfg, p, in, out, cache);
          return NoScalars{};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          gdn_backward(cfg, p, cache, in, dy, dx, g);
        });
  }
  for (int q_lora_rank : {cfg.mla_q_lora_rank, 0}) {
    ModelConfig mcfg = cfg;
    mcfg.mla_q_lora_rank = q_lora_rank;  // 0: Megatron's direct query projection
    Rng rng(seed + 3 + q_lora_rank);
    MlaParams<double> pd;
    mla_init(pd, mcfg, rng);
    perturb(pd, rng, 0.3);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    MlaParams<T> pt;
    mla_init(pt, mcfg, rng);
    MlaCache<T> cache;
    d.branch<T>(
        q_lora_rank ? "mla" : "mla_direct_q", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          mla_forward(mcfg, p, in, out, cache);
          return NoScalars{};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          mla_backward(mcfg, p, cache, in, dy, dx, g);
        });
  }
}

template <class T>
void dump_core(Dumper& d, std::uint64_t seed) {
  const ModelConfig& cfg = d.cfg;
  for (int window : {0, cfg.window}) {
    Rng rng(seed + 10 + window);
    AttentionParams<double> pd;
    attention_init(pd, cfg, rng);
    perturb(pd, rng, 0.1);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    AttentionParams<T> pt;
    attention_init(pt, cfg, rng);
    AttentionCache<T> cache;
    d.branch<T>(
        window ? "attention_window" : "attention", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          attention_forward(cfg, p, in, out, cache, window);
          return NoScalars{};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          attention_backward(cfg, p, cache, in, dy, dx, g, window);
        },
        {{"window", std::to_string(window)}});
  }
  {
    Rng rng(seed + 20);
    MlpParams<double> pd;
    mlp_init(pd, cfg, rng);
    perturb(pd, rng, 0.1);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    MlpParams<T> pt;
    mlp_init(pt, cfg, rng);
    MlpCache<T> cache;
    d.branch<T>(
        "mlp", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          mlp_forward(cfg, p, in, out, cache);
          return NoScalars{};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          mlp_backward(cfg, p, cache, in, dy, dx, g);
        });
  }
  {
    Rng rng(seed + 21);
    MoeParams<double> pd;
    moe_init(pd, cfg, rng);
    perturb(pd, rng, 0.1);
    auto x = normal({kB, kT, cfg.hidden}, rng), dout = normal({kB, kT, cfg.hidden}, rng);
    MoeParams<T> pt;
    moe_init(pt, cfg, rng);
    MoeCache<T> cache;
    const T loss_scale = T(0.5);  // as inside a 2-depth MTP block: exercises the scaling
    d.branch<T>(
        "moe", pd, pt, x, dout,
        [&](auto& p, auto& in, auto& out) {
          moe_forward(cfg, p, in, out, cache, loss_scale);
          return std::vector<std::pair<std::string, T>>{{"aux_loss", cache.routing.aux_loss},
                                                        {"z_loss", cache.routing.z_loss}};
        },
        [&](auto& p, auto& in, auto& dy, auto& dx, auto& g) {
          moe_backward(cfg, p, cache, in, dy, dx, g, loss_scale);
        },
        {{"loss_scale", "0.5"}});
  }
  {
    // RMSNorm: weight is the only parameter.
    Rng rng(seed + 30);
    auto x = cast<T>(normal({kB, kT, cfg.hidden}, rng)),
         dout = cast<T>(normal({kB, kT, cfg.hidden}, rng));
    auto w = cast<T>(normal({cfg.hidden}, rng, 0.3));
    for (auto& v : w.data) v += T(1);
    Tensor<T> out, dx(x.shape), dw(w.shape);
    RMSNormCache<T> cache;
    rmsnorm_forward(out, cache, x, w, static_cast<T>(cfg.norm_eps));
    rmsnorm_backward(dx, dw, dout, x, w, cache);
    SafetensorsDump st = d.start("rmsnorm", dtype_tag<T>());
    st.add("param/weight", w);
    st.add("input", x);
    st.add("dout", dout);
    st.add("out", out);
    st.add("grad/input", dx);
    st.add("grad/weight", dw);
    d.finish(st, "rmsnorm", dtype_tag<T>());
  }
  {
    // Embedding (tokens -> rows of wte) and the output layer (h -> logits), separately.
    Rng rng(seed + 40);
    Tensor<int> tokens({kB, kT});
    for (auto& v : tokens.data) v = rng.below(cfg.vocab_size);
    auto wte = cast<T>(normal({cfg.vocab_size, cfg.hidden}, rng));
    auto demb = cast<T>(normal({kB, kT, cfg.hidden}, rng));
    Tensor<T> emb, dwte(wte.shape);
    embedding_forward(emb, tokens, wte);
    embedding_backward(dwte, demb, tokens);
    SafetensorsDump st = d.start("embedding", dtype_tag<T>());
    st.add("tokens", tokens);
    st.add("param/weight", wte);
    st.add("dout", demb);
    st.add("out", emb);
    st.add("grad/weight", dwte);
    d.finish(st, "embedding", dtype_tag<T>());

    auto h = cast<T>(normal({kB, kT, cfg.hidden}, rng));
    auto wout = cast<T>(normal({cfg.vocab_size, cfg.hidden}, rng, 0.5));
    auto dlogits = cast<T>(normal({kB, kT, cfg.vocab_size}, rng));
    Tensor<T> logits, dh(h.shape), dwout(wout.shape);
    output_forward(logits, h, wout);
    output_backward(dh, dwout, dlogits, h, wout);
    SafetensorsDump so = d.start("output", dtype_tag<T>());
    so.add("param/weight", wout);
    so.add("input", h);
    so.add("dout", dlogits);
    so.add("out", logits);
    so.add("grad/input", dh);
    so.add("grad/weight", dwout);
    d.finish(so, "output", dtype_tag<T>());
  }
  {
    // Cross-entropy with per-token weights (0 = masked), loss = sum_i w_i ce_i, dloss = 1.
    Rng rng(seed + 50);
    const int n = kB * kT;
    auto logits = cast<T>(normal({n, cfg.vocab_size}, rng, 2.0));
    Tensor<int> targets({n});
    for (auto& v : targets.data) v = rng.below(cfg.vocab_size);
    Tensor<T> weights({n});
    for (int i = 0; i < n; ++i)
      weights[i] = i % 5 == 3 ? T(0) : static_cast<T>(rng.uniform(0.0, 1.0 / n));
    CrossEntropyCache<T> cache;
    const T loss = cross_entropy_forward(cache, logits, targets, weights);
    Tensor<T> dlogits(logits.shape);
    cross_entropy_backward(dlogits, logits, targets, weights, cache, T(1));
    SafetensorsDump st = d.start("cross_entropy", dtype_tag<T>());
    st.add("input", logits);
    st.add("targets", targets);
    st.add("weights", weights);
    st.add_scalar("out", loss);
    st.add("grad/input", dlogits);
    d.finish(st, "cross_entropy", dtype_tag<T>());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool corrupt = false, check = false;
  std::string python, script;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--corrupt") {
      corrupt = true;
    } else if (args[i] == "--check" && i + 2 < args.size()) {
      check = true;
      python = args[i + 1];
      script = args[i + 2];
      i += 2;
    } else {
      args.clear();
      break;
    }
  }
  if (args.empty()) {
    std::cerr << "usage: oracle_dump <out_dir> [--corrupt] [--check <python> <torch_oracle.py>]\n";
    return 2;
  }
  try {
    Dumper d{fs::path(args[0]), oracle_config(), corrupt};
    fs::create_directories(d.dir);
    const std::uint64_t seed = 20240611;
    dump_mixers<float>(d, seed);
    dump_mixers<double>(d, seed);
    dump_core<float>(d, seed);
    dump_core<double>(d, seed);
    std::cout << "oracle_dump: wrote " << d.files << " files to " << d.dir.string() << std::endl;
    if (check) return run_oracle(python, script, d.dir);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
