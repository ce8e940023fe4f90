// Whether this process can run the CUDA backend, asked without including any CUDA header, so
// the CLI and the tests can decide to run or to say "no usable CUDA GPU" in one line. With the
// CUDA backend built it opens its library and asks the runtime (engine/cuda/src/backends.cpp,
// probe.cu); without it, or when the library cannot be opened, the reason says so.
#pragma once

#include <string>

namespace ht::engine {

struct CudaProbe {
  bool usable = false;
  std::string reason;       // why not, when !usable (e.g. the runtime's error string)
  std::string device_name;  // device 0, when usable
};

CudaProbe cuda_probe();

}  // namespace ht::engine
