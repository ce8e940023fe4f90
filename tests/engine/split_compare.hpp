// The device executor with its ranks split (over processes or devices) against the same executor
// with every rank on one device, shared by test_dev_executor.cpp (threads) and
// test_dev_executor_mpi.cpp (mpirun): `steps` steps of clipped AdamW on the same batches, and every
// rank's losses, this side's ranks' gradients, the clipping norm and the weights after the update
// must be equal bit for bit (and every step must clip, so the norm's bits matter). Returns what
// differed, one line each; empty when all was equal.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/exec/compare.hpp"

namespace ht::engine::test {

inline std::vector<std::string> compare_split(cuda::DeviceExecutor& split, cuda::DeviceExecutor& one, int ep, int mbs,
                                              int vocab, std::uint64_t seed, int steps = 3) {
  std::vector<std::string> bad;
  AdamWConfig opt;
  opt.lr = 1e-2f;
  opt.clip_norm = 0.05f;
  for (int step = 0; step < steps; ++step) {
    const std::string at = "step " + std::to_string(step + 1) + ": ";
    const auto batches = exec::random_batches(ep, mbs, 2, 6, vocab, seed + static_cast<std::uint64_t>(step));
    split.zero_grad();
    one.zero_grad();
    const auto rs = split.step(batches), ro = one.step(batches);
    if (rs.loss != ro.loss || std::memcmp(&rs.total, &ro.total, sizeof(double)) != 0) bad.push_back(at + "losses differ");
    const auto g = exec::compare_owned(cuda::owned(split), cuda::owned(one), true);
    if (!g.bitwise || !g.missing.empty()) bad.push_back(at + "gradient differs: " + g.first_differing + g.missing);
    const double ns = split.optimizer_step(opt), no = one.optimizer_step(opt);
    if (std::memcmp(&ns, &no, sizeof(double)) != 0)
      bad.push_back(at + "norm " + std::to_string(ns) + " vs " + std::to_string(no));
    if (!(ns > opt.clip_norm)) bad.push_back(at + "the step did not clip");
    const auto w = exec::compare_owned(cuda::owned(split), cuda::owned(one), false);
    if (!w.bitwise || !w.missing.empty()) bad.push_back(at + "weights differ after AdamW: " + w.first_differing + w.missing);
  }
  return bad;
}

}  // namespace ht::engine::test
