// The CUDA library's table of entry points (entry_points.hpp), the one symbol the engine looks up
// when it opens the library.
#include "entry_points.hpp"

extern "C" __attribute__((visibility("default"))) const ht::engine::cuda::CudaEntryPoints* ht_engine_cuda_entry_points() {
  namespace g = ht::engine::cuda::gpu;
  static const ht::engine::cuda::CudaEntryPoints table{
      sizeof(ht::engine::cuda::CudaEntryPoints), &g::cuda_probe, &g::compare_layers_cuda,
      &g::measure_kernel_table_cuda, &g::measure_gemm_tflops_cuda, &g::make_cuda_executor,
      &g::make_nccl_group, &g::make_nccl_fabric};
  return &table;
}
