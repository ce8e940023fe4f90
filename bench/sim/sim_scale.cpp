// How the twin scales: one training step of a 64-logical-layer MoE hybrid with 32 microbatches,
// PP=8 x VPP=2 interleaved 1F1B with EP overlap, replayed on DGX H100 clusters from 64 to 1024
// GPUs (DP = GPUs / 8, EP = min(DP, 64)). Prints plan size, plan-build and replay wall time,
// simulated activities per second and peak RSS of the builder and of the simulation process.
// Then the same step at a mid scale with pairwise and aggregated all-to-all flows, to show how
// far the two flow models' predictions differ. Never fails on timing.
//
//   ht_bench_sim [MAX_GPUS=1024] [--no-compare]
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
  std::string model;
};

Point run(int gpus, ht::sim::A2aModel model) {
  namespace hs = ht::schedule;
  hs::ParallelConfig cfg;
  cfg.pp = 8;
  cfg.vpp = 2;
  cfg.dp = gpus / cfg.pp;
  cfg.ep = cfg.dp < 64 ? cfg.dp : 64;
  cfg.microbatches = 32;
  hs::ScheduleOptions opt;
  opt.overlap = true;
  opt.delay_wgrad = true;
  const auto t0 = Clock::now();
  const hs::Plan plan = hs::build_plan(ht::patterns::parse(pattern_64_layers()), hs::ModelDims{}, cfg, opt);
  const double build_s = seconds_since(t0);
  ht::sim::ReplayOptions ro;
  ro.keep_timeline = false;
  ro.a2a = model;
  const auto t1 = Clock::now();
  const double cpu0 = cpu_s(RUSAGE_CHILDREN) + cpu_s(RUSAGE_SELF);
  const auto r = ht::sim::replay(plan, ht::sim::preset("dgx-h100"), ht::sim::CostModel{}, ro);
  const double replay_s = seconds_since(t1);
  const double replay_cpu = cpu_s(RUSAGE_CHILDREN) + cpu_s(RUSAGE_SELF) - cpu0;
  return {build_s, replay_s, replay_cpu, r.summary.step_time_s, r.summary.a2a_hidden_fraction, r.summary.bubble_fraction,
          static_cast<long long>(plan.nodes.size()), r.summary.activities, r.summary.flows, r.a2a_model};
}

}  // namespace

int main(int argc, char** argv) {
  int max_gpus = 1024;
  bool compare = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-compare") compare = false;
    else max_gpus = std::atoi(argv[i]);
  }
  std::printf("twin scaling: pattern 16 x '[*E][ME][*E][ME]' (64 logical MoE layers), 32 microbatches,\n"
              "PP 8 x VPP 2 interleaved 1F1B with EP overlap, dgx-h100, a2a model auto (pairwise up to EP 8 or when skewed)\n\n");
  std::printf("(wall and CPU seconds: the machine may be shared; act/s = activities per replay CPU second;\n"
              " rss = peak of the plan-building process, sim = peak of the simulation child process)\n");
  std::printf("%6s %4s %4s %10s %9s %10s %9s %12s %11s %11s %10s %8s %9s %9s\n", "gpus", "dp", "ep", "nodes",
              "build_s", "replay_s", "cpu_s", "activities", "act/s", "step_ms", "a2a", "hidden", "rss_MiB", "sim_MiB");
  for (int gpus = 64; gpus <= max_gpus; gpus *= 2) {
    Point p = run(gpus, ht::sim::A2aModel::Auto);
    const int dp = gpus / 8;
    std::printf("%6d %4d %4d %10lld %9.2f %10.2f %9.2f %12lld %11.0f %11.3f %10s %7.1f%% %9.0f %9.0f\n", gpus, dp,
                dp < 64 ? dp : 64, p.nodes, p.build_s, p.replay_s, p.replay_cpu_s, p.activities,
                p.activities / p.replay_cpu_s,
                p.step_s * 1e3, p.model.c_str(), p.hidden * 100, rss_mib(RUSAGE_SELF), rss_mib(RUSAGE_CHILDREN));
    std::fflush(stdout);
  }
  if (compare) {
    std::printf("\npairwise vs aggregated all-to-all flows (same plans):\n");
    std::printf("%6s %4s %12s %12s %10s %10s %10s\n", "gpus", "ep", "pairwise_ms", "aggreg_ms", "diff", "pw_cpu_s",
                "ag_cpu_s");
    for (int gpus : {64}) {  // pairwise at EP 16 costs ~130 CPU s
      Point pw = run(gpus, ht::sim::A2aModel::Pairwise);
      Point ag = run(gpus, ht::sim::A2aModel::Aggregated);
      std::printf("%6d %4d %12.3f %12.3f %9.3f%% %10.2f %10.2f\n", gpus, gpus / 8, pw.step_s * 1e3, ag.step_s * 1e3,
                  (ag.step_s - pw.step_s) / pw.step_s * 100, pw.replay_cpu_s, ag.replay_cpu_s);
      std::fflush(stdout);
    }
  }
  return 0;
}
