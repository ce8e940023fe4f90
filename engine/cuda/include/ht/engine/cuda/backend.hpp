// The CUDA backend: the Backend interface over cuBLAS (matmul) and kernels that call the same
// HT_HD functions as the CPU reference (math.hpp, cpu/ops.hpp). Plain C++: no CUDA header here,
// so host code compiled by g++ (CLI, tests) can use it.
//
// Every pointer passed to a CudaBackend operation is a DEVICE pointer (DeviceBuffer below),
// except sum(), which returns its double to the host. Operations run on the backend's own stream
// and return after it has finished (synchronous), so results can be downloaded right away.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "ht/engine/backend.hpp"

namespace ht::engine::cuda {

// Throws std::runtime_error when no usable GPU is present (call cuda_probe() first).
std::unique_ptr<Backend> make_cuda_backend();

// Owning device allocation of `bytes` bytes with host <-> device copies (synchronous).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  void upload(const void* host, std::size_t bytes);
  void download(void* host, std::size_t bytes) const;
  template <class T> T* as() { return static_cast<T*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

template <class T> DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <class T> std::vector<T> to_host(const DeviceBuffer& b, std::size_t count) {
  std::vector<T> v(count);
  b.download(v.data(), count * sizeof(T));
  return v;
}

}  // namespace ht::engine::cuda
