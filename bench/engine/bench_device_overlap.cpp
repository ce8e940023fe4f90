// Overlap benchmark of the device EP executor (a program, not a test): the same plan run
// sequentially, as combined 1F1B, and as combined 1F1B with delayed wgrad (the W nodes run the
// weight-gradient GEMMs, exec/weight_steps.hpp) by EP ranks sharing one device -- the GPU
// (--device cuda) or the host emulation (--device host) -- and what the overlap hid.
//
// For each plan: the fastest of --steps steps after a warm-up step, by the step's own timeline
// (first span start to last span end, on the device's clock); from that timeline the compute and
// all-to-all busy time, the exposed all-to-all and the hidden fraction (traces::summarize, the
// figures the twin predicts). The peer is the sequential plan in the same run: the speedup is
// sequential / overlapped (with delayed wgrad, as before this column had a peer without it). The
// three plans' losses must be equal bit for bit (the program exits 1 if not): the overlap and
// delayed wgrad change the order of work, never the math.
//
// On the host emulation every stream runs on the one host thread in issue order, so nothing
// overlaps and the hidden fraction is ~0 by construction: that mode checks this program, not a
// speedup. On a GPU the ranks' compute streams and the comm stream run concurrently.
//
// Usage: bench_device_overlap [--device cuda|host] [--pattern P] [--ep N] [--microbatches M]
//                             [--hidden C] [--seq T] [--batch B] [--steps N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/traces/overlap.hpp"

using namespace ht;

namespace {

engine::ModelConfig model(int hidden) {
  engine::ModelConfig c;
  c.vocab_size = 512;
  c.hidden = hidden;
  c.head_dim = 64;
  c.num_heads = std::max(1, hidden / 64);
  c.num_kv_heads = std::max(1, c.num_heads / 2);
  c.ffn_hidden = 2 * hidden;
  c.num_experts = 8;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 2 * hidden;
  c.mamba_state_dim = 16;
  c.mamba_head_dim = 32;
  c.mamba_num_heads = std::max(1, 2 * hidden / 32);
  return c;
}

struct Run {
  double step_ms = 0, wall_ms = 0;
  traces::OverlapSummary summary;
  double w_gemm_share = 0;  // W nodes' GEMM FLOPs / (B + W nodes'): a counter, not a clock
  std::vector<std::vector<double>> loss;
};

int usage() {
  std::cerr << "usage: bench_device_overlap [--device cuda|host] [--pattern P] [--ep N] [--microbatches M] "
               "[--hidden C] [--seq T] [--batch B] [--steps N] [--json FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string device = "cuda", pattern = "[M*E][*E][*E]", json_out;
  int ep = 4, microbatches = 8, hidden = 0, seq = 0, batch = 2, steps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--device" && more) device = argv[++i];
    else if (a == "--pattern" && more) pattern = argv[++i];
    else if (a == "--ep" && more) ep = std::stoi(argv[++i]);
    else if (a == "--microbatches" && more) microbatches = std::stoi(argv[++i]);
    else if (a == "--hidden" && more) hidden = std::stoi(argv[++i]);
    else if (a == "--seq" && more) seq = std::stoi(argv[++i]);
    else if (a == "--batch" && more) batch = std::stoi(argv[++i]);
    else if (a == "--steps" && more) steps = std::stoi(argv[++i]);
    else if (a == "--json" && more) json_out = argv[++i];
    else return usage();
  }
  if (device != "cuda" && device != "host") return usage();
  const bool gpu = device == "cuda";
  if (hidden == 0) hidden = gpu ? 1024 : 128;
  if (seq == 0) seq = gpu ? 1024 : 64;
  if (steps < 1 || ep < 1 || microbatches < 1 || batch < 1 || seq < 1 || hidden < 64 || hidden % 64 != 0) {
    std::cerr << "bench_device_overlap: --steps, --ep, --microbatches, --batch and --seq must be >= 1 and --hidden a "
                 "multiple of 64\n";
    return 2;
  }
  if (gpu) {
    const auto probe = engine::cuda_probe();
    if (!probe.usable) {
      std::cerr << "bench_device_overlap: no usable CUDA GPU: " << probe.reason << "\n";
      return 3;
    }
  }
  const auto cfg = model(hidden);
  const auto p = patterns::parse(pattern);
  const auto data = engine::exec::random_batches(ep, microbatches, batch, seq, cfg.vocab_size, 1000);
  const auto make = gpu ? engine::cuda::DeviceExecutorFactory(engine::cuda::make_cuda_executor)
                        : engine::cuda::DeviceExecutorFactory(engine::cuda::make_host_executor);

  std::string device_name;
  const auto measure = [&](bool overlap, bool delay) {
    auto ex = make(p, cfg, 7, engine::exec::ep_plan(p, cfg, batch, seq, ep, microbatches, overlap, delay), {});
    device_name = ex->device();
    Run best;
    for (int i = 0; i <= steps; ++i) {  // step 0 warms up (allocations, cuBLAS handles)
      ex->zero_grad();
      const auto t0 = std::chrono::steady_clock::now();
      auto res = ex->step(data);
      const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      auto s = traces::summarize(res.timeline);
      if (i == 0) {
        best.loss = res.loss;
        continue;
      }
      if (i == 1 || s.span_s * 1e3 < best.step_ms) {
        best.step_ms = s.span_s * 1e3;
        best.wall_ms = wall_ms;
        best.summary = s;
        best.w_gemm_share = ht::traces::weight_gemm_share(res.timeline);
      }
    }
    return best;
  };
  std::cerr << "bench_device_overlap: " << pattern << ", EP " << ep << ", " << microbatches << " microbatches of "
            << batch << " x " << seq << ", hidden " << hidden << ", on " << device << "\n";
  const Run seq_run = measure(false, false);
  const Run nodelay_run = measure(true, false);
  const Run ovl_run = measure(true, true);
  const bool bitwise = seq_run.loss == ovl_run.loss && seq_run.loss == nodelay_run.loss;

  const Run* runs[] = {&seq_run, &nodelay_run, &ovl_run};
  const auto row = [&](const char* name, const char* fmt, auto value) {
    std::printf("%-24s", name);
    for (const Run* r : runs) std::printf(fmt, value(*r));
    std::printf("\n");
  };
  const auto hidden_ms = [](const Run& r) { return (r.summary.comm_busy_s - r.summary.comm_exposed_s) * 1e3; };
  std::printf("device overlap: %s on %s, EP %d (ranks sharing the device), %d microbatches of %d x %d, hidden %d\n",
              pattern.c_str(), device_name.c_str(), ep, microbatches, batch, seq, hidden);
  std::printf("%-24s%14s%14s%14s\n", "", "sequential", "combined 1F1B", "+delay wgrad");
  row("step (ms)", "%14.3f", [](const Run& r) { return r.step_ms; });
  row("host wall (ms)", "%14.3f", [](const Run& r) { return r.wall_ms; });
  row("compute busy (ms)", "%14.3f", [](const Run& r) { return r.summary.compute_busy_s * 1e3; });
  row("all-to-all busy (ms)", "%14.3f", [](const Run& r) { return r.summary.comm_busy_s * 1e3; });
  row("exposed a2a (ms)", "%14.3f", [](const Run& r) { return r.summary.comm_exposed_s * 1e3; });
  row("hidden a2a (ms)", "%14.3f", hidden_ms);
  row("hidden fraction", "%14.3f", [](const Run& r) { return r.summary.hidden_fraction; });
  row("W share of bwd GEMMs", "%14.3f", [](const Run& r) { return r.w_gemm_share; });
  const double speedup = seq_run.step_ms / std::max(ovl_run.step_ms, 1e-9);
  const double delay_speedup = nodelay_run.step_ms / std::max(ovl_run.step_ms, 1e-9);
  std::printf("speedup %.3fx (sequential / combined 1F1B with delayed wgrad); delayed wgrad %.3fx, hidden a2a %+.3f ms "
              "(combined 1F1B without / with it); losses %s\n",
              speedup, delay_speedup, hidden_ms(ovl_run) - hidden_ms(nodelay_run),
              bitwise ? "equal bit for bit" : "DIFFER (a bug: the overlap must not change the math)");

  if (!json_out.empty()) {
    const auto side = [](const Run& r) {
      return nlohmann::json{{"step_ms", r.step_ms},
                            {"wall_ms", r.wall_ms},
                            {"compute_busy_ms", r.summary.compute_busy_s * 1e3},
                            {"comm_busy_ms", r.summary.comm_busy_s * 1e3},
                            {"comm_exposed_ms", r.summary.comm_exposed_s * 1e3},
                            {"hidden_fraction", r.summary.hidden_fraction},
                            {"w_gemm_share", r.w_gemm_share}};
    };
    const nlohmann::json out = {{"device", device_name},  {"pattern", pattern},   {"ep", ep},
                                {"microbatches", microbatches}, {"batch", batch}, {"seq", seq},
                                {"hidden", hidden},           {"steps", steps},   {"sequential", side(seq_run)},
                                {"overlapped", side(ovl_run)}, {"overlapped_no_delay_wgrad", side(nodelay_run)},
                                {"speedup", speedup},         {"delay_wgrad_speedup", delay_speedup},
                                {"losses_bitwise", bitwise}};
    std::ofstream f(json_out + ".tmp");
    f << out.dump(2) << "\n";
    f.close();
    if (!f || std::rename((json_out + ".tmp").c_str(), json_out.c_str()) != 0) {
      std::cerr << "bench_device_overlap: cannot write " << json_out << "\n";
      return 1;
    }
  }
  return bitwise ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "bench_device_overlap: " << e.what() << "\n";
  return 1;
}
