// `hybrid-twin verify`: runs the equivalence pairs of the EP-overlap executor on a few shipped
// configs and prints one row per (pair, config): grouped vs flattened, combined 1F1B vs
// sequential, delayed wgrad on vs off, checkpoint resume across grouping and schedule (all
// bitwise), EP = n vs EP = 1 (within a stated bound), PP = k (with VPP) vs PP = 1 (bitwise).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "cuda_rows.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/engine/rng.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/io/log.hpp"

namespace ht::cli {
namespace {

using engine::Batch;
using engine::ModelConfig;
using engine::exec::Executor;

struct VerifyConfig {
  std::string name;
  std::string pattern;
  int ep, microbatches;
  int shared_ffn;  // 0 = no shared expert
};

const std::vector<VerifyConfig>& shipped_configs() {
  static const std::vector<VerifyConfig> configs{
      {"grouped-mamba-moe", "[M*E][*E]", 2, 4, 0},
      {"mixed-dense-gdn", "M[*-]E[GE]", 2, 3, 0},
      {"shared-expert-ep4", "[*E]-E", 4, 2, 8},
      // Hybrid MTP runs only the sequential schedule at PP = 1 (rule O3), so this config has
      // the grouped, EP and resume rows and none of the overlap, delayed-wgrad or PP rows.
      {"mtp-depth", "[M*E]E/*E", 2, 3, 0},
  };
  return configs;
}

ModelConfig model_for(const VerifyConfig& vc) {
  ModelConfig c;
  c.vocab_size = 64;
  c.hidden = 32;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_hidden = 48;
  c.num_experts = 8;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 24;
  c.moe_shared_ffn_hidden = vc.shared_ffn;
  c.mamba_state_dim = 8;
  c.mamba_head_dim = 8;
  c.mamba_num_heads = 4;
  c.gdn_num_heads = 2;
  c.gdn_num_v_heads = 2;
  c.gdn_head_dim_qk = 8;
  c.gdn_head_dim_v = 8;
  return c;
}

constexpr int kBatch = 2, kSeq = 16;

std::vector<std::vector<Batch>> batches_for(int ranks, int mbs, int vocab, std::uint64_t seed) {
  return engine::exec::random_batches(ranks, mbs, kBatch, kSeq, vocab, seed);
}

schedule::Plan plan_for(const patterns::ParsedPattern& p, const ModelConfig& cfg, int ep, int mbs, bool overlap,
                        bool delay) {
  return engine::exec::ep_plan(p, cfg, kBatch, kSeq, ep, mbs, overlap, delay);
}

using Row = VerifyRow;  // cuda_rows.hpp

// Owned parameters (values or gradients) of two executors, experts matched by canonical name.
using Diff = engine::exec::OwnedDiff;
using engine::exec::compare_owned;

double loss_diff(const engine::exec::StepResult& a, const engine::exec::StepResult& b, bool& bitwise) {
  double m = 0;
  for (std::size_t r = 0; r < a.loss.size(); ++r)
    for (std::size_t k = 0; k < a.loss[r].size(); ++k) {
      double x = a.loss[r][k], y = b.loss.at(r).at(k);
      if (std::memcmp(&x, &y, sizeof x) != 0) bitwise = false;
      m = std::max(m, std::fabs(x - y));
    }
  return m;
}

Row bitwise_row(std::string pair, const VerifyConfig& vc, const engine::exec::StepResult& ra,
                const engine::exec::StepResult& rb, Executor& a, Executor& b) {
  Row row{std::move(pair), vc.name, 0, false, "", ""};
  bool bitwise = true;
  row.max_abs_diff = loss_diff(ra, rb, bitwise);
  Diff d = compare_owned(a, b, true);
  row.max_abs_diff = std::max(row.max_abs_diff, d.max_abs);
  row.bitwise = bitwise && d.bitwise;
  row.verdict = row.bitwise ? "pass" : "fail";
  return row;
}

// The pattern's items cut into `segments` contiguous pipe segments, as evenly as possible, the
// earlier segments taking one more (with fewer items than segments the last ones are empty:
// model chunks that only relay the hidden state).
std::string pipelined(const patterns::ParsedPattern& p, int segments) {
  const auto items = p.items();
  const std::size_t n = items.size(), k = static_cast<std::size_t>(segments);
  std::string text;
  std::size_t next = 0;
  for (std::size_t s = 0; s < k; ++s) {
    if (s > 0) text += "|";
    for (std::size_t i = 0; i < n / k + (s < n % k ? 1 : 0); ++i, ++next)
      text += items[next].grouped ? "[" + items[next].symbols + "]" : items[next].symbols;
  }
  return text;
}

// PP = k vs PP = 1 on the same global batch, over two optimizer steps: losses, every gradient,
// the clipping norm and the parameters after each step. A layer's gradients accumulate over the
// same microbatches in the same order on its one stage, the DP all-reduce and the global norm
// sum in the single-stage order, so the expected result is bitwise. Even microbatch counts run
// PP 2 x VPP 2 with the overlapped interleaved 1F1B and delayed wgrad; odd ones PP 3 with plain
// 1F1B.
Row pp_invariance_row(const VerifyConfig& vc, const ModelConfig& cfg, const patterns::ParsedPattern& grouped) {
  const bool interleaved = vc.microbatches % 2 == 0;
  schedule::ParallelConfig pc;
  pc.pp = interleaved ? 2 : 3;
  pc.vpp = interleaved ? 2 : 0;
  pc.ep = vc.ep;
  pc.dp = vc.ep;
  pc.microbatches = vc.microbatches;
  schedule::ScheduleOptions so;
  so.overlap = interleaved;
  so.delay_wgrad = interleaved;
  const auto piped = patterns::parse(pipelined(grouped, pc.pp * pc.model_chunks()));
  const std::uint64_t seed = 42;
  Executor a(piped, cfg, seed, schedule::build_plan(piped, engine::exec::schedule_dims(cfg, kBatch, kSeq), pc, so));
  Executor b(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, false, false));
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  bool bitwise = true;
  double max_diff = 0;
  auto take = [&](const Diff& d) {
    bitwise &= d.bitwise;
    max_diff = std::max(max_diff, d.max_abs);
  };
  for (int s = 0; s < 2; ++s) {
    const auto data = batches_for(vc.ep, vc.microbatches, cfg.vocab_size, 20 + static_cast<std::uint64_t>(s));
    a.zero_grad();
    b.zero_grad();
    auto ra = a.step(data), rb = b.step(data);
    max_diff = std::max(max_diff, loss_diff(ra, rb, bitwise));
    take(compare_owned(a, b, true));
    take(compare_owned(b, a, true));  // both ways: every parameter of each run exists in the other
    const double na = a.optimizer_step(opt), nb = b.optimizer_step(opt);
    if (std::memcmp(&na, &nb, sizeof na) != 0) bitwise = false;
    max_diff = std::max(max_diff, std::fabs(na - nb));
    take(compare_owned(a, b, false));
  }
  std::ostringstream note;
  note << "pp " << pc.pp << (interleaved ? " x vpp 2, interleaved 1F1B" : ", 1F1B") << " '" << piped.text
       << "', 2 optimizer steps";
  return Row{"pp_invariance", vc.name, max_diff, bitwise, bitwise ? "pass" : "fail", note.str()};
}

std::vector<Row> run_config(const VerifyConfig& vc) {
  std::vector<Row> rows;
  const ModelConfig cfg = model_for(vc);
  const auto grouped = patterns::parse(vc.pattern);
  const auto flat = patterns::flatten(grouped);
  const auto data = batches_for(vc.ep, vc.microbatches, cfg.vocab_size, 1);
  const std::uint64_t seed = 42;
  const bool overlap = grouped.mtp_depths == 0;  // hybrid MTP never overlaps (rule O3)
  {
    Executor a(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, overlap, overlap));
    Executor b(flat, cfg, seed, plan_for(flat, cfg, vc.ep, vc.microbatches, overlap, overlap));
    auto ra = a.step(data), rb = b.step(data);
    rows.push_back(bitwise_row("grouped_vs_flattened", vc, ra, rb, a, b));
    if (!overlap) rows.back().note = "sequential: hybrid MTP never overlaps (rule O3)";
  }
  if (overlap) {
    Executor a(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, true, false));
    Executor b(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, false, false));
    auto ra = a.step(data), rb = b.step(data);
    rows.push_back(bitwise_row("overlap_vs_sequential", vc, ra, rb, a, b));
  }
  if (overlap) {
    Executor a(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, true, true));
    Executor b(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, true, false));
    auto ra = a.step(data), rb = b.step(data);
    rows.push_back(bitwise_row("delay_wgrad_on_vs_off", vc, ra, rb, a, b));
  }
  {
    // EP = n over n ranks vs EP = 1 running the same microbatches one after the other.
    Executor a(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, false, false));
    Executor b(grouped, cfg, seed, plan_for(grouped, cfg, 1, vc.ep * vc.microbatches, false, false));
    std::vector<std::vector<Batch>> one(1);
    for (auto& rb : data)
      for (auto& mb : rb) one[0].push_back(mb);
    a.step(data);
    b.step(one);
    Diff d = compare_owned(a, b, true);
    Row row{"ep_invariance", vc.name, d.max_abs, d.bitwise, "", ""};
    // Same terms, other association: the EP run sums each rank's microbatches, then the ranks
    // (all-reduce), and runs each expert's GEMM over all sources at once. Reassociating K
    // float32 terms moves a sum by at most (K - 1) u sum|t| (u = 2^-24); with K <= tokens of
    // the step and |t| bounded by the largest gradient entry, we accept K u max|g| per element.
    const double k_terms = static_cast<double>(vc.ep) * vc.microbatches * kBatch * kSeq;
    const double bound = k_terms * std::ldexp(1.0, -24) * std::max(d.max_ref, 1e-30);
    row.verdict = d.max_abs <= bound ? "pass" : "fail";
    std::ostringstream note;
    note << "bound " << std::setprecision(3) << bound;
    row.note = note.str();
    rows.push_back(row);
  }
  if (grouped.mtp_depths == 0) rows.push_back(pp_invariance_row(vc, cfg, grouped));  // MTP: PP = 1 only
  {
    engine::AdamWConfig opt;
    opt.lr = 1e-2f;
    Executor a(grouped, cfg, seed, plan_for(grouped, cfg, vc.ep, vc.microbatches, overlap, overlap));
    Executor b(flat, cfg, seed + 1, plan_for(flat, cfg, vc.ep, vc.microbatches, false, false));
    const auto path = (std::filesystem::temp_directory_path() / ("hybrid-twin-verify-" + vc.name + ".safetensors")).string();
    for (int s = 0; s < 2; ++s) {
      a.zero_grad();
      a.step(batches_for(vc.ep, vc.microbatches, cfg.vocab_size, 10 + static_cast<std::uint64_t>(s)));
      a.optimizer_step(opt);
    }
    a.save(path);
    b.load(path);
    std::remove(path.c_str());
    const auto next = batches_for(vc.ep, vc.microbatches, cfg.vocab_size, 12);
    a.zero_grad();
    b.zero_grad();
    auto ra = a.step(next), rb = b.step(next);
    a.optimizer_step(opt);
    b.optimizer_step(opt);
    bool bitwise = true;
    Row row{"checkpoint_resume", vc.name, loss_diff(ra, rb, bitwise), false, "", ""};
    Diff d = compare_owned(a, b, false);
    row.max_abs_diff = std::max(row.max_abs_diff, d.max_abs);
    row.bitwise = bitwise && d.bitwise;
    row.verdict = row.bitwise ? "pass" : "fail";
    row.note = overlap ? "overlapped grouped -> sequential flattened" : "sequential grouped -> sequential flattened";
    rows.push_back(row);
  }
  return rows;
}

struct VerifyArgs {
  std::string backend = "cpu";
  bool json_out = false;
};

int run(const VerifyArgs& a) {
  if (a.backend == "cuda") return verify_cpu_vs_cuda(a.json_out);  // cuda_rows.cpp
  if (a.backend == "cuda-host") return verify_cuda_layers_on_host(a.json_out);
  std::vector<Row> rows;
  for (const auto& vc : shipped_configs()) {
    io::log::say("verify") << vc.name << " '" << vc.pattern << "' ep " << vc.ep << ", " << vc.microbatches
                           << " microbatches";
    auto r = run_config(vc);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return print_verify_rows(rows, a.json_out);  // cuda_rows.cpp
}

const Registration reg{{
    "verify",
    "Prove on shipped configs that grouping, overlap, delayed wgrad and resume change nothing",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<VerifyArgs>();
      sub.add_option("--backend", a->backend,
                     "cpu: the shipped configs; cuda: CPU vs GPU per op and per layer; cuda-host: the CUDA layer "
                     "code on the host emulation of the device (no GPU)")
          ->check(CLI::IsMember({"cpu", "cuda", "cuda-host"}));
      sub.add_flag("--json", a->json_out, "print a JSON list of rows (pair, config, max_abs_diff, bitwise, verdict)");
      return [a] { return run(*a); };
    },
    40}};

}  // namespace
}  // namespace ht::cli
