// The CUDA layers' code (engine/cuda/include/ht/engine/cuda/dev/) on the host emulation of the
// device policy, against the CPU reference layers: every layer forward and backward, every
// weight gradient and loss. The GPU runs this same layer code (only the policy differs), so these
// tests are what checks its indexing, per-row math and accumulation orders on a machine without
// a GPU. Oracle: the CPU reference in float64 (itself checked by finite differences and PyTorch).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "ht/engine/cuda/dev/compare.hpp"
#include "ht/engine/cuda/layer_compare.hpp"

using namespace ht::engine;
using ht::engine::cuda::LayerComparison;
using ht::engine::cuda::LayerShape;

namespace {

std::string describe(const LayerComparison& c) {
  return c.layer + " " + c.quantity + ": err_dev " + std::to_string(c.err_dev) + " err_ref " +
         std::to_string(c.err_ref) + " bound " + std::to_string(c.bound) + " scale " + std::to_string(c.scale);
}

LayerShape odd_shape() {  // GQA 3:1, odd sizes, window shorter than the sequence, top-3 of 5
  LayerShape s;
  s.batch = 3;
  s.seq = 11;
  s.cfg.hidden = 40;
  s.cfg.vocab_size = 97;
  s.cfg.num_heads = 6;
  s.cfg.num_kv_heads = 2;
  s.cfg.head_dim = 8;
  s.cfg.window = 4;
  s.cfg.ffn_hidden = 56;
  s.cfg.num_experts = 5;
  s.cfg.moe_topk = 3;
  s.cfg.moe_ffn_hidden = 24;
  s.cfg.moe_shared_ffn_hidden = 16;
  return s;
}

}  // namespace

TEST_CASE("CUDA layer code (host emulation) matches the CPU reference within the stated float32 bound",
          "[engine][cuda-layers]") {
  for (const LayerShape& shape : {LayerShape{}, odd_shape()})
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const auto rows = ht::engine::cuda::compare_layers_host(seed, shape);
      std::set<std::string> layers;
      for (const auto& c : rows) {
        INFO(describe(c));
        CHECK(c.pass);
        CHECK(c.scale > 0);
        // On the host the layer code runs the CPU's GEMMs and row functions in the CPU's orders:
        // bitwise equal to the CPU layers, except where the CPU's SwiGLU uses Eigen's vectorised
        // exp (mlp, moe) and its results differ in the last bits.
        if (c.layer != "mlp" && c.layer != "moe") CHECK(c.diff_cpu == 0);
        layers.insert(c.layer);
      }
      CHECK(rows.size() == 55);
      CHECK(layers == std::set<std::string>{"rmsnorm", "embedding", "output+ce", "mlp", "attention",
                                            "attention_window", "moe", "mamba2", "gdn", "mla"});
    }
}

TEST_CASE("CUDA layer code in float64 agrees with the float64 CPU reference to float64 rounding",
          "[engine][cuda-layers]") {
  // Same data, same GEMMs (cpu::matmul under the host policy), only the elementwise exp may come
  // from another implementation: the difference must be K double-precision roundings, not more.
  for (const LayerShape& shape : {LayerShape{}, odd_shape()}) {
    const auto rows = ht::engine::cuda::compare_layers_host(7, shape, /*float64=*/true);
    REQUIRE(rows.size() == 55);
    for (const auto& c : rows) {
      INFO(describe(c));
      CHECK(c.err_dev <= 8.0 * c.depth * 0x1p-53 * c.scale);
    }
  }
}

TEST_CASE("the layer comparison fails a result off by a small relative error", "[engine][cuda-layers]") {
  // The check itself: a dev result 1e-4 (relative to scale) away from the reference must fail,
  // one that equals the float32 CPU result must pass.
  std::vector<LayerComparison> out;
  dev::compare::Run<dev::Host, float> run{out};
  const std::vector<double> ref{1.0, -2.0, 0.5}, cpu{1.0 + 0x1p-23, -2.0, 0.5};
  run.add("t", "same", 64, ref, cpu, cpu);
  run.add("t", "off", 64, ref, cpu, std::vector<double>{1.0, -2.0 + 2e-4, 0.5});
  run.add("t", "nan", 64, ref, cpu, std::vector<double>{1.0, NAN, 0.5});
  run.add("t", "short", 64, ref, cpu, std::vector<double>{1.0, -2.0});
  REQUIRE(out.size() == 4);
  CHECK(out[0].pass);
  CHECK(out[0].bound == Approx(4 * 0x1p-23 + 2 * 64 * 0x1p-24 * 2.0));
  CHECK_FALSE(out[1].pass);
  CHECK_FALSE(out[2].pass);
  CHECK_FALSE(out[3].pass);
}
