// Run under `mpirun -np P` (CTest does): the device executor on the host emulation with its ranks
// split over the P processes (the MPI process group carries the rows, routing counts, gradients and
// the norm's running sum) against the same executor with every rank in one process -- a reference
// each process runs itself. Over 3 steps of combined 1F1B with delayed wgrad and clipped AdamW: every
// rank's losses, this process's ranks' gradients, the norm and the weights after the update, bit for
// bit. A split run that drops the residual's gradient at the combine must differ (the comparison
// can fail), and the timeline holds this process's ranks' nodes only.
//   test_dev_executor_mpi PATTERN EP MICROBATCHES         compare
//   test_dev_executor_mpi PATTERN EP MICROBATCHES refuse  expect "processes do not divide"
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "ht/engine/exec/compare.hpp"
#include "ht/patterns/pattern.hpp"
#include "split_compare.hpp"

using namespace ht::engine;

namespace {

int failures = 0;
void check(bool ok, const std::string& what, int process) {
  if (ok) return;
  ++failures;
  std::cerr << "process " << process << ": FAILED: " << what << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: test_dev_executor_mpi PATTERN EP MICROBATCHES [refuse]\n";
    return 2;
  }
  try {
    const auto group = cuda::make_mpi_group();
    const int me = group->process(), procs = group->processes();
    const auto pattern = ht::patterns::parse(argv[1]);
    const int ep = std::stoi(argv[2]), mbs = std::stoi(argv[3]);
    const ModelConfig cfg = cuda::model_check_config();
    const auto plan = exec::ep_plan(pattern, cfg, 2, 6, ep, mbs, true, true);
    cuda::DeviceExecutorOptions split_opts;
    split_opts.group = group.get();
    if (argc > 4 && std::string(argv[4]) == "refuse") {
      try {
        cuda::make_host_executor(pattern, cfg, 5, plan, split_opts);
        check(false, "a split of " + std::to_string(ep) + " ranks over " + std::to_string(procs) + " processes ran", me);
      } catch (const std::exception& e) {
        check(std::string(e.what()).find("processes do not divide") != std::string::npos,
              std::string("refused with another reason: ") + e.what(), me);
        if (me == 0) std::cout << "refused: " << e.what() << "\n";
      }
      return failures ? 1 : 0;
    }
    auto split = cuda::make_host_executor(pattern, cfg, 5, plan, split_opts);
    auto one = cuda::make_host_executor(pattern, cfg, 5, plan);
    int local = 0;
    for (int r = 0; r < ep; ++r) local += split->local(r);
    check(local == ep / procs, "process runs " + std::to_string(local) + " ranks", me);

    for (const auto& line : test::compare_split(*split, *one, ep, mbs, cfg.vocab_size, 40)) check(false, line, me);
    // The split step's timeline holds this process's ranks' nodes, one span each.
    const auto res = split->step(exec::random_batches(ep, mbs, 2, 6, cfg.vocab_size, 3));
    std::size_t spans = 0, nodes = 0;
    for (const auto& node : plan.nodes) nodes += split->local(node.rank);
    for (const auto& sp : res.timeline.spans) spans += split->local(sp.device);
    check(spans == nodes && spans == res.timeline.spans.size(),
          std::to_string(res.timeline.spans.size()) + " spans for " + std::to_string(nodes) + " local nodes", me);
    std::size_t compared = 0;
    for (int r = 0; r < ep; ++r)
      if (split->local(r)) compared += split->parameters(r).size();
    // The comparison can fail: a split run that drops the residual's gradient at the combine.
    cuda::DeviceExecutorOptions bad_opts = split_opts;
    bad_opts.test_drop_residual_grad = true;
    auto bad = cuda::make_host_executor(pattern, cfg, 5, plan, bad_opts);
    auto good = cuda::make_host_executor(pattern, cfg, 5, plan);
    const auto batches = exec::random_batches(ep, mbs, 2, 6, cfg.vocab_size, 7);
    bad->step(batches);
    good->step(batches);
    const auto d = exec::compare_owned(cuda::owned(*bad), cuda::owned(*good), true);
    check(!d.bitwise && d.max_abs > 0, "a dropped residual gradient went unnoticed", me);

    std::cout << "process " << me << " of " << procs << ": " << local << " of " << ep << " ranks, " << compared
              << " parameter tensors per step compared over 3 steps: " << (failures ? "DIFFERENT" : "bitwise")
              << "; dropped residual gradient caught (first differing " << d.first_differing << ")\n";
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "test_dev_executor_mpi: " << e.what() << "\n";
    return 1;
  }
}
