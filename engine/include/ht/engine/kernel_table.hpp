// Kernel tables from a real GPU (`hybrid-twin calibrate --gpu`): microbenchmarks, on the local
// GPU through the CUDA backend, of what the twin prices by shape, written as a cost file that
// `simulate --costs` reads, so that one GPU gives a twin of that hardware:
//  - BF16 GEMMs (cuBLAS, fp32 accumulation) on the grid m, n, k in {256, 512, 1024, 2048, 4096}
//    (the grid of the twin's built-in sm_90 table, so the measured one replaces it shape for
//    shape), TFLOP/s of the fastest of `repeats` timed runs after a warm-up;
//  - HBM bandwidth: a streaming copy kernel over buffers far larger than L2 (bytes read + written);
//  - the device's name, SM count and memory.
// The host emulation runs the same sequence on the CPU (float32 GEMMs with every size divided by
// 16, a memcpy for the bandwidth) so that the program and the file are tested without a GPU; its
// figures describe the CPU and the file says so ("emulated": true).
// Not measured yet: attention, scans, NCCL collectives inside the node (need two or more GPUs).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ht::engine {

struct KernelTable {
  std::string device;
  bool emulated = false;
  int sms = 0;
  double memory_bytes = 0;
  std::vector<int> sizes;                // the grid, ascending
  std::vector<double> gemm_bf16_tflops;  // sizes^3 entries, index (im * n + in) * n + ik
  double hbm_bytes_per_s = 0;            // achieved by the copy kernel
};

struct KernelBenchOptions {
  bool emulate = false;  // the host emulation instead of the GPU
  int repeats = 10;
  std::vector<int> sizes{256, 512, 1024, 2048, 4096};
};

// On GPU 0 (throws std::runtime_error without a usable GPU or without the CUDA backend), or the
// host emulation.
KernelTable measure_kernel_table(const KernelBenchOptions& options);

// The cost-file form (sim/cost_model.hpp, "kernel_table"), and back (throws std::runtime_error
// naming the field).
nlohmann::json kernel_table_to_json(const KernelTable& table);
KernelTable kernel_table_from_json(const nlohmann::json& j);

namespace cuda {
// The GPU side of measure_kernel_table (engine/cuda/src/kernel_bench.cu).
KernelTable measure_kernel_table_cuda(const KernelBenchOptions& options);
}  // namespace cuda

}  // namespace ht::engine
