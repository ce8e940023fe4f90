// One rank of the device executor on the host emulation: the code a GPU runs for a whole hybrid
// model -- embedding, pre-norm residual blocks, final norm, output layer, cross-entropy, MTP
// depths, router losses, AdamW -- against HybridModel, the CPU reference: bit for bit where the
// layers are (attention, Mamba2, GDN, MLA), within the float32 bound of the layer comparison where
// the CPU's SwiGLU uses Eigen's vectorised exp; grouped vs flattened bit for bit on the device.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/engine/model.hpp"
#include "ht/engine/optimizer.hpp"
#include "ht/patterns/pattern.hpp"

using namespace ht::engine;
namespace pat = ht::patterns;

namespace {

ModelConfig small_config() { return cuda::model_check_config(); }

Batch random_batch(int b, int t, int vocab, Rng& rng) {
  Batch batch{Tensor<int>({b, t}), Tensor<int>({b, t})};
  for (auto& v : batch.tokens.data) v = rng.below(vocab);
  for (auto& v : batch.targets.data) v = rng.below(vocab);
  return batch;
}

struct Run {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

// One rank on the one-rank sequential plan of `text` for batches like `batch`.
std::unique_ptr<cuda::DeviceExecutor> one_rank(const std::string& text, const Batch& batch, std::uint64_t seed) {
  const auto p = pat::parse(text);
  return cuda::make_host_executor(
      p, small_config(), seed,
      exec::ep_plan(p, small_config(), batch.tokens.dim(0), batch.tokens.dim(1), 1, 1, false, false));
}

Run run_device(const std::string& text, const Batch& batch, std::uint64_t seed) {
  auto ex = one_rank(text, batch, seed);
  Run r;
  r.loss = ex->step({{batch}}).total;
  for (auto& p : ex->parameters(0)) r.grads[p.canonical] = p.grad->data;
  return r;
}

Run run_cpu(HybridModel<float>& m, const Batch& batch) {
  Run r;
  r.loss = m.forward(batch).total;
  m.backward();
  for (auto& p : m.parameters()) r.grads[p.canonical] = p.grad->data;
  return r;
}

}  // namespace

TEST_CASE("device (one rank, host emulation) equals HybridModel bit for bit on attention and MTP patterns",
          "[engine][cuda-layers][dev-model]") {
  for (const std::string text : {"***", "WWW/W", "[*]*/*/*", "MG[*M]"}) {
    INFO(text);
    Rng rng(5, "batch");
    const Batch batch = random_batch(2, 7, small_config().vocab_size, rng);
    HybridModel<float> cpu(pat::parse(text), small_config(), 9);
    const Run a = run_cpu(cpu, batch), b = run_device(text, batch, 9);
    CHECK(a.loss == b.loss);
    REQUIRE(a.grads.size() == b.grads.size());
    for (const auto& [name, g] : a.grads) {
      INFO(name);
      CHECK(g == b.grads.at(name));
    }
  }
}

TEST_CASE("device: grouped and flattened patterns give the same bits, MoE, MLP and MTP included",
          "[engine][cuda-layers][dev-model]") {
  const std::vector<std::pair<std::string, std::string>> pairs{
      {"[*E]-[*-]", "*E-*-"}, {"[WE]E/WE", "WEE/WE"}, {"-[*-]/*-/*-", "-*-/*-/*-"}};
  for (const auto& [grouped, flat] : pairs) {
    INFO(grouped << " vs " << flat);
    Rng rng(3, "batch");
    const Batch batch = random_batch(2, 6, small_config().vocab_size, rng);
    const Run a = run_device(grouped, batch, 4), b = run_device(flat, batch, 4);
    CHECK(a.loss == b.loss);
    REQUIRE(a.grads.size() == b.grads.size());
    for (const auto& [name, v] : a.grads) {
      INFO(name);
      CHECK(v == b.grads.at(name));
    }
  }
}

TEST_CASE("compare_models on the host emulation: grouped == flattened bitwise, CPU within the bound",
          "[engine][cuda-layers][dev-model]") {
  // The rows `verify --backend cuda` prints for the GPU, computed by the same code on the host.
  const auto rows = cuda::compare_models(cuda::make_host_executor, 11);
  REQUIRE(rows.size() == 8);
  for (const auto& r : rows) {
    INFO(r.pair << " " << r.config << ": " << r.note);
    CHECK(r.pass);
    if (r.pair == "device_grouped_vs_flattened") CHECK(r.bitwise);
  }
  // Mamba2, GDN, attention and MLA are bitwise to the CPU on the host; SwiGLU differs in exp's
  // last bits.
  CHECK(rows.back().config == "MG*G");
  CHECK(rows[rows.size() - 2].config == "G+E/+E");
  CHECK(rows.back().bitwise);
}

TEST_CASE("device: AdamW on the device equals the CPU's, bit for bit, weights and moments",
          "[engine][cuda-layers][dev-model]") {
  // Three clipped AdamW steps (clip 0.5) on the CPU model and on one device rank: losses, norms,
  // then every weight and both moments.
  const std::string text = "M[*]*/*";
  const ModelConfig cfg = small_config();
  HybridModel<float> cpu(pat::parse(text), cfg, 6);
  AdamWConfig oc;
  oc.clip_norm = 0.5f;
  AdamWState<float> s_cpu;
  Rng rng(1, "steps");
  std::unique_ptr<cuda::DeviceExecutor> dev;
  for (int step = 0; step < 3; ++step) {
    const Batch batch = random_batch(2, 5, cfg.vocab_size, rng);
    if (!dev) dev = one_rank(text, batch, 6);
    cpu.zero_grad();
    const double l0 = cpu.forward(batch).total;
    cpu.backward();
    auto pc = cpu.parameters();
    const double n0 = adamw_step(oc, s_cpu, pc);
    dev->zero_grad();
    const double l1 = dev->step({{batch}}).total;
    const double n1 = dev->optimizer_step(oc);
    CHECK(l0 == l1);
    CHECK(n0 == n1);
    CHECK(n0 > oc.clip_norm);  // the clip factor is exercised
  }
  const AdamWState<float> moments = dev->optimizer_state(0);
  CHECK(moments.step == 3);
  std::map<std::string, const Tensor<float>*> on_dev;
  auto pd = dev->parameters(0);
  for (auto& p : pd) on_dev[p.canonical] = p.value;
  for (auto& p : cpu.parameters()) {
    INFO(p.canonical);
    CHECK(p.value->data == on_dev.at(p.canonical)->data);
    CHECK(moments.exp_avg.at(p.canonical).data == s_cpu.exp_avg.at(p.canonical).data);
    CHECK(moments.exp_avg_sq.at(p.canonical).data == s_cpu.exp_avg_sq.at(p.canonical).data);
  }
}

TEST_CASE("device refuses bad input in one line", "[engine][cuda-layers][dev-model]") {
  Batch bad{Tensor<int>({1, 3}), Tensor<int>({1, 3})};
  bad.tokens[1] = small_config().vocab_size;
  auto ex = one_rank("*", bad, 1);
  CHECK_THROWS_WITH(ex->step({{bad}}), Catch::Contains("outside the vocabulary"));
}
