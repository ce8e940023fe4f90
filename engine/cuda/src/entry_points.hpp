// The two backends the engine loads when a command first needs them (backends.cpp): the CUDA/NCCL
// backend (library ht_engine_cuda) and the MPI process group (library ht_engine_mpi). Each library
// exports one C function that returns its table of entry points; the engine's public functions
// (cuda_probe, make_cuda_executor, make_mpi_group, ...) forward to it, so nothing that only parses
// a pattern or replays a plan maps cuBLAS, NCCL or MPI into its process.
// Both sides are built from the same tree in one build: a table is checked by its size, not
// versioned across releases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/cuda/layer_compare.hpp"
#include "ht/engine/cuda/process_group.hpp"
#include "ht/engine/cuda_probe.hpp"
#include "ht/engine/kernel_table.hpp"

namespace ht::engine::cuda {

struct CudaEntryPoints {
  std::size_t size = sizeof(CudaEntryPoints);
  CudaProbe (*probe)();
  std::vector<LayerComparison> (*compare_layers)(std::uint64_t, const LayerShape&);
  KernelTable (*measure_kernel_table)(const KernelBenchOptions&);
  double (*measure_gemm_tflops)(int, int);
  std::unique_ptr<DeviceExecutor> (*make_executor)(const patterns::ParsedPattern&, const ModelConfig&, std::uint64_t,
                                                   schedule::Plan, DeviceExecutorOptions);
  std::unique_ptr<ProcessGroup> (*make_nccl_group)();
  std::unique_ptr<ThreadFabric> (*make_nccl_fabric)(int);
};

struct MpiEntryPoints {
  std::size_t size = sizeof(MpiEntryPoints);
  std::unique_ptr<ProcessGroup> (*make_group)();
};

// The implementations inside the CUDA library (engine/cuda/src/*.cu); the engine reaches them only
// through the table.
namespace gpu {
CudaProbe cuda_probe();
std::vector<LayerComparison> compare_layers_cuda(std::uint64_t seed, const LayerShape& shape);
KernelTable measure_kernel_table_cuda(const KernelBenchOptions& options);
double measure_gemm_tflops_cuda(int n, int reps);
std::unique_ptr<DeviceExecutor> make_cuda_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan, DeviceExecutorOptions options);
std::unique_ptr<ProcessGroup> make_nccl_group();
std::unique_ptr<ThreadFabric> make_nccl_fabric(int devices);
}  // namespace gpu

}  // namespace ht::engine::cuda

extern "C" {
const ht::engine::cuda::CudaEntryPoints* ht_engine_cuda_entry_points();
const ht::engine::cuda::MpiEntryPoints* ht_engine_mpi_entry_points();
}
