// The device policy of the CUDA layers (dev/*.hpp), emulated on the host.
//
// Every CUDA layer is written once, as a template over a device policy D that provides memory,
// GEMMs and a "launch": run f(i) for i in [0, n), one GPU thread per i. D = Cuda (dev/cuda.cuh,
// nvcc only) runs it on the GPU: cuBLAS GEMMs, one kernel per launch. D = Host (here) runs the
// very same layer code on the CPU: memory is host memory, a launch is a loop, a GEMM is the CPU
// reference's cpu::matmul. So the layer code the GPU runs -- its indexing, its per-row math, its
// accumulation orders -- is compiled and tested on every machine, GPU or not; only the policy's
// few lines of CUDA are left for the GPU to check.
//
// Lambdas passed to launch() are written `[=] HT_HD (long i) { ... }` (an nvcc extended lambda
// under --extended-lambda) and capture raw pointers and scalars only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/math.hpp"

namespace ht::engine::dev {

struct Host {
  static constexpr const char* kName = "host";
  static inline thread_local double gemm_flops = 0;  // 2 m n k of every GEMM this thread issued (benchmarks read it)
  // Fresh memory is poisoned (NaN, or -1 for indices), as cudaMalloc'd or cached device memory
  // holds garbage: layer code that reads what it never wrote fails the host tests instead of
  // reading the zeros a fresh host page happens to hold.
  // Every block carries its size in a header, so the emulated device memory in use and its peak
  // are known (live_bytes, peak_bytes: what a test holds an executor's memory to).
  template <class T> static T* alloc(std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= kHeader);
    if (n == 0) return nullptr;
    auto* base = static_cast<unsigned char*>(::operator new(n * sizeof(T) + kHeader));
    *reinterpret_cast<std::size_t*>(base) = n * sizeof(T);
    T* p = reinterpret_cast<T*>(base + kHeader);
    if constexpr (std::is_floating_point_v<T>)
      std::fill_n(p, n, std::numeric_limits<T>::quiet_NaN());
    else
      std::fill_n(p, n, T(-1));
    const long long now = live += static_cast<long long>(n * sizeof(T));
    long long seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) continue;
    return p;
  }
  template <class T> static void release(T* p) {
    if (!p) return;
    auto* base = reinterpret_cast<unsigned char*>(p) - kHeader;
    live -= static_cast<long long>(*reinterpret_cast<std::size_t*>(base));
    ::operator delete(base);
  }
  static long long live_bytes() { return live.load(); }
  static long long peak_bytes() { return peak.load(); }
  static void reset_peak() { peak = live.load(); }
  template <class T> static void fill_zero(T* p, std::size_t n) { std::fill_n(p, n, T(0)); }
  // Device to device, host to device, device to host: all plain copies here.
  template <class T> static void copy(T* dst, const T* src, std::size_t n) { std::copy_n(src, n, dst); }
  template <class T> static void upload(T* dst, const T* host, std::size_t n) { std::copy_n(host, n, dst); }
  template <class T> static void download(T* host, const T* src, std::size_t n) { std::copy_n(src, n, host); }
  // out (m, n) (+)= op(a) op(b), the layout of cpu::matmul (gemm.hpp).
  template <class T>
  static void gemm(T* out, const T* a, const T* b, int m, int n, int k, bool trans_a, bool trans_b, bool accumulate) {
    gemm_flops += 2.0 * m * n * k;
    cpu::matmul<T>(out, a, b, m, n, k, trans_a, trans_b, accumulate);
  }
  template <class F> static void launch(long n, F f) {
    for (long i = 0; i < n; ++i) f(i);
  }
  static void synchronize() {}
  // Timing marks: the host clock (a device policy records an event on its stream instead).
  using Event = double;
  static Event record() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static double seconds(Event from, Event to) { return to - from; }
  static void release_event(Event) {}
  // Streams (the device executor runs each rank on its own and the exchanges on another): the
  // host runs every operation when it is issued, so it is ordered after everything issued before
  // it on any stream, and selecting or waiting is nothing to do.
  static void set_stream(int id) { stream = id; }
  static int stream_id() { return stream; }
  static void wait(Event) {}
  static void synchronize_all() {}
  static inline thread_local int stream = 0;  // per thread, as a device context is
  // acc + sum of x[i]^2 in float64, continuing one running sum (the CPU's global_grad_norm order).
  template <class T> static double sumsq_acc(double acc, const T* x, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return acc;
  }
  static double gemm_flops_total() { return gemm_flops; }

 private:
  static constexpr std::size_t kHeader = 16;
  static inline std::atomic<long long> live{0}, peak{0};  // bytes, over every thread
};

// An owning buffer of n values in D's memory. resize() keeps nothing (callers overwrite or zero).
template <class D, class T>
class Buf {
 public:
  Buf() = default;
  explicit Buf(std::size_t n) { resize(n); }
  ~Buf() { D::release(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      D::release(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  void resize(std::size_t n) {
    if (n == n_) return;
    D::release(p_);
    p_ = nullptr;
    n_ = 0;
    p_ = D::template alloc<T>(n);
    n_ = n;
  }
  // resize + zero fill
  void assign_zero(std::size_t n) {
    resize(n);
    D::fill_zero(p_, n_);
  }
  T* get() { return p_; }
  const T* get() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class D, class T> Buf<D, T> upload(const T* host, std::size_t n) {
  Buf<D, T> b(n);
  D::upload(b.get(), host, n);
  return b;
}

}  // namespace ht::engine::dev
