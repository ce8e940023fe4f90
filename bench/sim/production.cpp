// The production what-ifs of docs/twin.md, timed: Qwen3-Next-80B-A3B on 128 H100s (TP 1, PP 4 x
// VPP 3, EP 32, GBS 256) and Qwen3-235B-A22B on 256 H100s (TP 2, PP 8 x VPP 4, EP 32, GBS 2048,
// i.e. 128 microbatches, recomputing layernorm and moe_act), both with the distributed optimizer
// and its overlaps, each folded (schedule/fold.hpp, what simulate does) and unfolded (the peer).
// Prints the plan size, the wall and CPU time of building, estimating memory and replaying, peak
// memory of both processes, and the prediction. A program, not a test: it never fails on timing.
//
//   ht_bench_production [all|qwen3-next|qwen3-235b]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "ht/schedule/flops.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/model_card.hpp"
#include "ht/sim/replay.hpp"

namespace {

namespace hs = ht::schedule;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double cpu_s(int who) {
  rusage u{};
  getrusage(who, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

double rss_gib(int who) {
  rusage u{};
  getrusage(who, &u);
  return double(u.ru_maxrss) / 1024.0 / 1024.0;
}

struct Case {
  const char* name;
  const char* model;
  hs::LayoutRequest layout;
  const char* recompute;
};

void run(const Case& c, bool fold) {
  hs::ModelCard card = hs::model_card(c.model);
  hs::ModelDims dims = card.dims;
  hs::ParallelConfig base;
  base.optimizer = {hs::GradSync::Megatron, true, true, true, 0};
  base.recompute = hs::parse_recompute(c.recompute);
  const hs::ParallelConfig cfg = hs::resolve_layout(c.layout, dims, base);
  hs::ScheduleOptions opt;
  opt.overlap = cfg.ep > 1 && ht::patterns::parse(card.pattern).mtp_depths == 0;
  opt.delay_wgrad = opt.overlap;
  const auto pattern = ht::patterns::parse(card.pattern);
  opt.fold = fold;
  std::printf("%s (%s): %s on %d GPUs, %s, %d microbatches, recompute %s, overlap %s\n", c.name,
              fold ? "folded" : "unfolded", c.model, cfg.global_ranks(), hs::describe_layout(cfg).c_str(),
              cfg.microbatches, c.recompute, opt.overlap ? "on" : "off");
  const double cpu0 = cpu_s(RUSAGE_SELF);
  auto t = Clock::now();
  const hs::Plan plan = hs::build_plan(pattern, dims, cfg, opt);
  const double build_s = seconds_since(t);
  t = Clock::now();
  const hs::MemoryBreakdown mem = hs::peak_memory(pattern, dims, cfg, plan);
  const double memory_s = seconds_since(t);
  const double self_cpu = cpu_s(RUSAGE_SELF) - cpu0;
  ht::sim::ReplayOptions ro;
  ro.keep_timeline = false;
  const double child0 = cpu_s(RUSAGE_CHILDREN);
  t = Clock::now();
  const auto r = ht::sim::replay(plan, ht::sim::preset("dgx-h100"), ht::sim::CostModel{}, ro);
  const double replay_s = seconds_since(t);
  const double replay_cpu = cpu_s(RUSAGE_CHILDREN) - child0;
  const double gbs = double(cfg.dp) * cfg.microbatches * dims.micro_batch;
  const double mfu = hs::model_flops_per_step(pattern, dims, gbs) / r.summary.step_time_s / cfg.global_ranks() / 989e12;
  std::printf("  plan %lld nodes on %d simulated ranks: build %.1f s, memory walk %.1f s (%.1f CPU s), replay %.1f s wall / %.1f CPU s, "
              "total %.1f s wall\n",
              static_cast<long long>(plan.nodes.size()), plan.global_ranks(), build_s, memory_s, self_cpu, replay_s, replay_cpu,
              build_s + memory_s + replay_s);
  std::printf("  peak RSS: builder %.2f GiB, simulation %.2f GiB; %lld activities (%.0f per CPU s)\n",
              rss_gib(RUSAGE_SELF), rss_gib(RUSAGE_CHILDREN), static_cast<long long>(r.summary.activities),
              double(r.summary.activities) / replay_cpu);
  std::printf("  predicted step %.3f s, %.0f tokens/s, MFU %.1f %%, memory %.1f GiB (activations %.1f GiB, %d "
              "microbatches in flight), all-to-all hidden %.1f %%\n\n",
              r.summary.step_time_s, gbs * dims.seq_len / r.summary.step_time_s, 100 * mfu, mem.total() / (1 << 30),
              mem.activations / (1 << 30), mem.microbatches_in_flight, 100 * r.summary.a2a_hidden_fraction);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "all";
  hs::LayoutRequest next;
  next.gpus = 128;
  next.pp = 4;
  next.vpp = 3;
  next.ep = 32;
  next.gbs = 256;
  hs::LayoutRequest big;
  big.gpus = 256;
  big.tp = 2;
  big.pp = 8;
  big.vpp = 4;
  big.ep = 32;
  big.gbs = 2048;
  // Folded (what simulate does), then unfolded (the peer: every rank replayed).
  auto both = [](const Case& c) {
    for (bool fold : {true, false}) {
      try {
        run(c, fold);
      } catch (const std::exception& e) {
        std::printf("%s (%s): refused: %s\n\n", c.name, fold ? "folded" : "unfolded", e.what());
      }
    }
  };
  if (which == "all" || which == "qwen3-next") both({"qwen3-next", "qwen3-next-80b-a3b", next, "none"});
  if (which == "all" || which == "qwen3-235b") both({"qwen3-235b", "qwen3-235b-a22b", big, "layernorm,moe_act"});
  return 0;
}
