// How the twin scales: one training step of a 64-logical-layer MoE hybrid with 32 microbatches,
// PP=8 x VPP=2 interleaved 1F1B with EP overlap, replayed folded (schedule/fold.hpp) on DGX H100
// clusters from 64 to 1024 GPUs (DP = GPUs / 8, EP = min(DP, 64)), and unfolded next to it up to
// --unfolded-max GPUs (the peer: the same replay of every rank, and how far the folded
// prediction is from it). Prints plan size, plan-build and replay time, the growth of replay CPU
// time per doubling and peak RSS of the builder and of the simulation processes; then a dense
// GPT-3-shaped model on 16384 GPUs, and the same MoE step at a mid scale with pairwise and
// aggregated all-to-all flows. Never fails on timing.
//
//   ht_bench_sim [MAX_GPUS=1024] [--unfolded-max N=128] [--dense-gpus N=16384] [--no-compare]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/sim/replay.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double cpu_s(int who) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double rss_mib(int who) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

std::string pattern_64_layers() {
  // 16 pipe segments (PP 8 x VPP 2) of 4 logical layers: attention+MoE and Mamba+MoE groups.
  std::string p;
  for (int s = 0; s < 16; ++s) p += (s ? "|" : "") + std::string("[*E][ME][*E][ME]");
  return p;
}

struct Point {
  double build_s, replay_s, replay_cpu_s, step_s, hidden, bubble;
  long long nodes, activities, flows;
  int simulated;
  std::string model;
};

namespace hs = ht::schedule;

Point run_plan(const std::string& pattern, const hs::ModelDims& dims, const hs::ParallelConfig& cfg,
               hs::ScheduleOptions opt, ht::sim::A2aModel model, bool fold) {
  opt.fold = fold;
  const auto t0 = Clock::now();
  const hs::Plan plan = hs::build_plan(ht::patterns::parse(pattern), dims, cfg, opt);
  const double build_s = seconds_since(t0);
  ht::sim::ReplayOptions ro;
  ro.keep_timeline = false;
  ro.a2a = model;
  const auto t1 = Clock::now();
  const double cpu0 = cpu_s(RUSAGE_CHILDREN) + cpu_s(RUSAGE_SELF);
  const auto r = ht::sim::replay(plan, ht::sim::preset("dgx-h100"), ht::sim::CostModel{}, ro);
  const double replay_s = seconds_since(t1);
  const double replay_cpu = cpu_s(RUSAGE_CHILDREN) + cpu_s(RUSAGE_SELF) - cpu0;
  return {build_s, replay_s, replay_cpu, r.summary.step_time_s, r.summary.a2a_hidden_fraction,
          r.summary.bubble_fraction, static_cast<long long>(plan.nodes.size()), r.summary.activities,
          r.summary.flows, r.folded_ranks > 0 ? r.folded_ranks : r.summary.gpus, r.a2a_model};
}

Point run(int gpus, ht::sim::A2aModel model, bool fold) {
  hs::ParallelConfig cfg;
  cfg.pp = 8;
  cfg.vpp = 2;
  cfg.dp = gpus / cfg.pp;
  cfg.ep = cfg.dp < 64 ? cfg.dp : 64;
  cfg.microbatches = 32;
  hs::ScheduleOptions opt;
  opt.overlap = true;
  opt.delay_wgrad = true;
  return run_plan(pattern_64_layers(), hs::ModelDims{}, cfg, opt, model, fold);
}

// A dense GPT-3 175B-shaped model (96 layers, hidden 12288, 96 heads, FFN 4h, sequence 2048,
// GPT-3 paper table 2.1) on TP 8 x PP 8 x DP, 8 microbatches of one sequence per replica.
Point run_dense(int gpus) {
  hs::ModelDims d;
  d.hidden = 12288;
  d.ffn_hidden = 4 * 12288;
  d.num_heads = 96;
  d.num_kv_heads = 96;
  d.head_dim = 128;
  d.vocab = 50257;
  d.seq_len = 2048;
  d.gated_ffn = 0;
  hs::ParallelConfig cfg;
  cfg.tp = 8;
  cfg.pp = 8;
  cfg.dp = gpus / 64;
  cfg.microbatches = 8;
  std::string pattern;
  for (int l = 0; l < 96; ++l) pattern += "*-";
  return run_plan(pattern, d, cfg, hs::ScheduleOptions{}, ht::sim::A2aModel::Auto, true);
}

}  // namespace

int main(int argc, char** argv) {
  int max_gpus = 1024, unfolded_max = 128, dense_gpus = 16384;
  bool compare = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-compare") compare = false;
    else if (a == "--unfolded-max" && i + 1 < argc) unfolded_max = std::atoi(argv[++i]);
    else if (a == "--dense-gpus" && i + 1 < argc) dense_gpus = std::atoi(argv[++i]);
    else if (a == "-h" || a == "--help") {
      std::printf("ht_bench_sim [MAX_GPUS=1024] [--unfolded-max N=128] [--dense-gpus N=16384 (0: none)] [--no-compare]\n");
      return 0;
    } else max_gpus = std::atoi(argv[i]);
  }
  std::printf("twin scaling: pattern 16 x '[*E][ME][*E][ME]' (64 logical MoE layers), 32 microbatches,\n"
              "PP 8 x VPP 2 interleaved 1F1B with EP overlap, dgx-h100, a2a model auto (pairwise up to EP 8 or when skewed)\n"
              "folded (one simulated rank per pipeline stage); unfolded next to it up to %d GPUs\n\n", unfolded_max);
  std::printf("(wall and CPU seconds: the machine may be shared; growth = replay CPU s / the previous row's;\n"
              " rss = peak of the plan-building process, sim = peak of the simulation child processes)\n");
  std::printf("%6s %4s %4s %4s %9s %8s %9s %7s %7s %11s %8s %8s %8s %12s %9s %10s\n", "gpus", "dp", "ep", "sim",
              "nodes", "build_s", "replay_s", "cpu_s", "growth", "step_ms", "hidden", "rss_MiB", "sim_MiB",
              "unfolded_ms", "diff", "unf_cpu_s");
  double previous_cpu = 0;
  for (int gpus = 64; gpus <= max_gpus; gpus *= 2) {
    const Point p = run(gpus, ht::sim::A2aModel::Auto, true);
    const int dp = gpus / 8;
    std::printf("%6d %4d %4d %4d %9lld %8.2f %9.2f %7.2f %7s %11.3f %7.1f%% %8.0f %8.0f", gpus, dp, dp < 64 ? dp : 64,
                p.simulated, p.nodes, p.build_s, p.replay_s, p.replay_cpu_s,
                previous_cpu > 0 ? (std::to_string(p.replay_cpu_s / previous_cpu).substr(0, 4) + "x").c_str() : "-",
                p.step_s * 1e3, p.hidden * 100, rss_mib(RUSAGE_SELF), rss_mib(RUSAGE_CHILDREN));
    previous_cpu = p.replay_cpu_s;
    if (gpus <= unfolded_max) {
      const Point u = run(gpus, ht::sim::A2aModel::Auto, false);
      std::printf(" %12.3f %8.4f%% %10.2f", u.step_s * 1e3, (p.step_s - u.step_s) / u.step_s * 100, u.replay_cpu_s);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (dense_gpus > 0) {
    const Point d = run_dense(dense_gpus);
    std::printf("\ndense GPT-3 175B shape (96 x '*-', h 12288, seq 2048) on %d GPUs, TP 8 x PP 8 x DP %d, 8 microbatches:\n"
                "  %d simulated ranks, %lld plan nodes, build %.2f s, replay %.2f s wall (%.2f CPU s), step %.3f ms, "
                "bubble %.1f %%, peak rss %.0f MiB, sim %.0f MiB\n",
                dense_gpus, dense_gpus / 64, d.simulated, d.nodes, d.build_s, d.replay_s, d.replay_cpu_s, d.step_s * 1e3,
                d.bubble * 100, rss_mib(RUSAGE_SELF), rss_mib(RUSAGE_CHILDREN));
    std::fflush(stdout);
  }
  if (compare) {
    std::printf("\npairwise vs aggregated all-to-all flows (same plans, unfolded):\n");
    std::printf("%6s %4s %12s %12s %10s %10s %10s\n", "gpus", "ep", "pairwise_ms", "aggreg_ms", "diff", "pw_cpu_s",
                "ag_cpu_s");
    for (int gpus : {64}) {  // pairwise at EP 16 costs ~130 CPU s
      Point pw = run(gpus, ht::sim::A2aModel::Pairwise, false);
      Point ag = run(gpus, ht::sim::A2aModel::Aggregated, false);
      std::printf("%6d %4d %12.3f %12.3f %9.3f%% %10.2f %10.2f\n", gpus, gpus / 8, pw.step_s * 1e3, ag.step_s * 1e3,
                  (ag.step_s - pw.step_s) / pw.step_s * 100, pw.replay_cpu_s, ag.replay_cpu_s);
      std::fflush(stdout);
    }
  }
  return 0;
}
