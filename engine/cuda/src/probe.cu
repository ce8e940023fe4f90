// cuda_probe() of the CUDA library (entry_points.hpp): usable iff the runtime sees at least one device
// and device 0 can be selected. Without a driver cudaGetDeviceCount fails with
// cudaErrorInsufficientDriver rather than cudaErrorNoDevice (reference/toolchain.md), so any
// error, or a count of zero, means "not usable", and its error string is the reason.
#include <string>

#include <cuda_runtime.h>

#include "entry_points.hpp"

namespace ht::engine::cuda::gpu {

CudaProbe cuda_probe() {
  CudaProbe p;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    p.reason = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
    return p;
  }
  if (count == 0) {
    p.reason = "the CUDA runtime reports 0 devices";
    return p;
  }
  cudaDeviceProp prop{};
  const cudaError_t pe = cudaGetDeviceProperties(&prop, 0);
  if (pe != cudaSuccess) {
    p.reason = std::string(cudaGetErrorName(pe)) + " (" + cudaGetErrorString(pe) + ")";
    return p;
  }
  p.usable = true;
  p.device_name = prop.name;
  return p;
}

}  // namespace ht::engine::cuda::gpu
