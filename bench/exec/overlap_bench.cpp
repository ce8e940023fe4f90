// Overlap benchmark of the EP executor (a program, not a test): how much of the all-to-all the
// combined-1F1B schedule hides on the CPU backend when the in-process link is throttled so that
// one dispatch takes about as long as one expert computation.
//
// 1. An unthrottled sequential run measures the mean expert (mlp forward) time and the bytes of
//    one dispatch from the plan; the link bandwidth is set so bytes / bandwidth == expert time.
// 2. Sequential, combined-1F1B and combined-1F1B with delayed wgrad steps run with that throttle
//    (best of a few repeats each). With delayed wgrad the W nodes run the weight-gradient GEMMs
//    (exec/weight_steps.hpp), so the backward before each dispatch backward is shorter.
// 3. Printed: step times, all-to-all busy, exposed and hidden time, hidden fraction, the share of
//    the backward's GEMM work the W nodes ran, the busy-time lower bound (per rank max(compute
//    busy, comm busy)) and the share of the hideable all-to-all (min(comm, compute) per rank) that
//    the overlap actually hid.
// Usage: bench_overlap [pattern] [repeats]
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "ht/engine/exec/compare.hpp"
#include "ht/engine/exec/executor.hpp"
#include "ht/engine/rng.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/traces/overlap.hpp"

using namespace ht;

namespace {

engine::ModelConfig model() {
  engine::ModelConfig c;
  c.vocab_size = 256;
  c.hidden = 128;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.ffn_hidden = 256;
  c.num_experts = 8;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 256;
  c.mamba_state_dim = 16;
  c.mamba_head_dim = 16;
  c.mamba_num_heads = 8;
  return c;
}

constexpr int kEp = 2, kMicrobatches = 8, kBatch = 2, kSeq = 128;

std::vector<std::vector<engine::Batch>> batches(int vocab) {
  return engine::exec::random_batches(kEp, kMicrobatches, kBatch, kSeq, vocab, 1000);
}

schedule::Plan plan(const patterns::ParsedPattern& p, const engine::ModelConfig& cfg, bool overlap, bool delay) {
  return engine::exec::ep_plan(p, cfg, kBatch, kSeq, kEp, kMicrobatches, overlap, delay);
}

struct Run {
  double step_s = 0;
  traces::OverlapSummary summary;
  double lower_bound_s = 0, hideable_s = 0;
  double w_gemm_share = 0;  // W nodes' GEMM FLOPs / (B + W nodes' GEMM FLOPs): a counter, not a clock
  std::string priority;  // host.comm_priority the run got
};

Run measure(const patterns::ParsedPattern& p, const engine::ModelConfig& cfg, bool overlap, bool delay,
            engine::runtime::LinkModel link, int repeats, bool realtime) {
  Run best;
  best.step_s = 1e30;
  const auto data = batches(cfg.vocab_size);
  for (int i = 0; i < repeats; ++i) {
    engine::exec::ExecutorOptions opt;
    opt.link = link;
    opt.comm_realtime = realtime;
    engine::exec::Executor ex(p, cfg, 7, plan(p, cfg, overlap, delay), opt);
    auto res = ex.step(data);
    auto s = traces::summarize(res.timeline);
    if (s.span_s < best.step_s) {
      best.step_s = s.span_s;
      best.summary = s;
      best.priority = res.timeline.metadata.at("host.comm_priority");
      best.w_gemm_share = ht::traces::weight_gemm_share(res.timeline);
      best.lower_bound_s = 0;
      best.hideable_s = 0;
      for (const auto& d : s.devices) {
        best.lower_bound_s = std::max(best.lower_bound_s, std::max(d.compute_busy_s, d.comm_busy_s));
        best.hideable_s += std::min(d.compute_busy_s, d.comm_busy_s);
      }
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string text = argc > 1 ? argv[1] : "[M*E][*E][*E]";
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  const auto cfg = model();
  const auto p = patterns::parse(text);

  // 1. Calibrate the throttle: mean mlp forward time vs dispatch bytes.
  engine::exec::Executor probe(p, cfg, 7, plan(p, cfg, false, false));
  auto res = probe.step(batches(cfg.vocab_size));
  double mlp_s = 0;
  int mlp_n = 0;
  for (const auto& span : res.timeline.spans)
    if (span.category == "mlp" && span.name.rfind("F ", 0) == 0) {
      mlp_s += span.duration_s;
      ++mlp_n;
    }
  mlp_s /= std::max(1, mlp_n);
  double dispatch_bytes = 0;
  for (const auto& n : probe.plan().nodes)
    if (n.slot == schedule::Slot::Dispatch && n.phase == schedule::Phase::Forward && n.rank == 0) {
      for (const auto& t : n.sends) dispatch_bytes += t.bytes;
      break;
    }
  engine::runtime::LinkModel link;
  link.bandwidth_gbps = dispatch_bytes / mlp_s / 1e9;
  link.latency_us = 5;

  std::printf("pattern %s, EP %d, %d microbatches of %dx%d tokens, hidden %d, %d experts top-%d\n", text.c_str(), kEp,
              kMicrobatches, kBatch, kSeq, cfg.hidden, cfg.num_experts, cfg.moe_topk);
  std::printf("expert forward %.3f ms; dispatch %.0f KB per rank -> throttle %.3f GB/s, %g us latency\n", mlp_s * 1e3,
              dispatch_bytes / 1e3, link.bandwidth_gbps, link.latency_us);

  // Both comm-stream priorities (runtime::CpuWorldOptions::comm_realtime): real-time is the
  // engine's default where the OS grants it; normal lets the OS share the cores evenly.
  for (const bool realtime : {true, false}) {
    const Run runs[] = {measure(p, cfg, false, false, link, repeats, realtime),
                        measure(p, cfg, true, false, link, repeats, realtime),
                        measure(p, cfg, true, true, link, repeats, realtime)};
    const bool granted = runs[2].priority == "realtime";
    std::printf("\ncomm priority %s%s\n", realtime ? "realtime" : "normal",
                realtime && !granted ? " (refused by the OS: ran at normal priority)" : "");
    auto row = [&](const char* name, const char* format, auto value) {
      std::printf("%-22s", name);
      for (const Run& r : runs) std::printf(format, value(r));
      std::printf("\n");
    };
    std::printf("%-22s %12s %12s %12s\n", "", "sequential", "overlapped", "+delay wgrad");
    row("step (ms)", " %12.2f", [](const Run& r) { return r.step_s * 1e3; });
    row("compute busy (ms)", " %12.2f", [](const Run& r) { return r.summary.compute_busy_s * 1e3; });
    row("all-to-all busy (ms)", " %12.2f", [](const Run& r) { return r.summary.comm_busy_s * 1e3; });
    row("exposed a2a (ms)", " %12.2f", [](const Run& r) { return r.summary.comm_exposed_s * 1e3; });
    row("hidden a2a (ms)", " %12.2f",
        [](const Run& r) { return (r.summary.comm_busy_s - r.summary.comm_exposed_s) * 1e3; });
    row("hidden fraction", " %12.3f", [](const Run& r) { return r.summary.hidden_fraction; });
    row("W share of bwd GEMMs", " %12.3f", [](const Run& r) { return r.w_gemm_share; });
    row("busy lower bound (ms)", " %12.2f", [](const Run& r) { return r.lower_bound_s * 1e3; });
    for (int i = 1; i < 3; ++i) {
      const Run& r = runs[i];
      const double hidden = r.summary.comm_busy_s - r.summary.comm_exposed_s;
      std::printf("%s: speedup %.3fx over sequential; overlap hid %.1f%% of the hideable all-to-all (min(comm, "
                  "compute) per rank)\n",
                  i == 1 ? "overlapped" : "+delay wgrad", runs[0].step_s / r.step_s,
                  100.0 * hidden / std::max(r.hideable_s, 1e-12));
    }
    std::printf("delayed wgrad: step %.3fx of overlapped without it, hidden a2a %+.2f ms\n",
                runs[2].step_s / runs[1].step_s,
                ((runs[2].summary.comm_busy_s - runs[2].summary.comm_exposed_s) -
                 (runs[1].summary.comm_busy_s - runs[1].summary.comm_exposed_s)) * 1e3);
  }
  return 0;
}
