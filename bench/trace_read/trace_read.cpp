// Benchmark of ht::traces::read_chrome_trace on large profiles: writes a synthetic Kineto-style
// trace of the requested size to a temporary directory (CPU ops, runtime calls, flow events and
// GPU kernels with Kineto's full argument sets on compute and NCCL streams), reads it, and prints
// the read rate and the peak resident memory against the file size. Every measurement runs in
// its own forked process so that peak RSS belongs to that reader alone. The peer is nlohmann's
// DOM parse of a smaller file (a DOM of the big one would need gigabytes). Files are deleted
// afterwards. Usage: ht_bench_trace_read [--mb 300] [--dom-mb 30]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ht/traces/chrome.hpp"

namespace fs = std::filesystem;

namespace {

const char* kKernels[] = {
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3>)",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
    "Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, "
    "true, false, false>(Flash_fwd_params)",
    "void transformer_engine::rmsnorm::rmsnorm_fwd_tuned_kernel<transformer_engine::rmsnorm::"
    "Kernel_traits<__nv_bfloat16, __nv_bfloat16, float, __nv_bfloat16, unsigned int, 4096u, 1u, 4u, "
    "1u, 16u, 4u>>(transformer_engine::rmsnorm::FwdParams)",
};
const char* kComm[] = {
    "ncclDevKernel_AllToAll_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, "
    "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, "
    "int, int, int, int, int, void**, int, int, int)",
};
const char* kOps[] = {"aten::mm", "aten::add", "aten::_softmax", "aten::addmm", "c10d::alltoall_base_"};

// Appends one "iteration" (a CPU op, its launch, a flow pair and the kernel) per call.
void append_block(std::string& out, std::uint64_t i, double& t) {
  const bool comm = i % 4 == 3;
  const char* kernel = comm ? kComm[i % 2] : kKernels[i % 5];
  const int stream = comm ? 20 : 7;
  const double cpu_ts = t, launch_ts = t + 2.125, gpu_ts = t + 6.5, dur = 5 + (i % 17);
  char buf[2048];
  int n = std::snprintf(
      buf, sizeof buf,
      "  {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": 81234, \"tid\": 81234, "
      "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"External id\": %llu, \"Record function id\": 0, "
      "\"Sequence number\": %llu, \"Fwd thread id\": 0, \"Ev Idx\": %llu}},\n"
      "  {\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 81234, "
      "\"tid\": 81234, \"ts\": %.3f, \"dur\": 3.250, \"args\": {\"External id\": %llu, \"cbid\": 211, "
      "\"correlation\": %llu}},\n"
      "  {\"ph\": \"s\", \"id\": %llu, \"pid\": 81234, \"tid\": 81234, \"ts\": %.3f, \"cat\": \"ac2g\", "
      "\"name\": \"ac2g\"},\n"
      "  {\"ph\": \"f\", \"id\": %llu, \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"cat\": \"ac2g\", "
      "\"name\": \"ac2g\", \"bp\": \"e\"},\n"
      "  {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"%s\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
      "\"dur\": %.3f, \"args\": {\"External id\": %llu, \"queued\": 0, \"device\": 0, \"context\": 1, "
      "\"stream\": %d, \"correlation\": %llu, \"registers per thread\": 72, \"shared memory\": 49152, "
      "\"blocks per SM\": 1.939394, \"warps per SM\": 7.757576, \"grid\": [256, 1, 1], \"block\": "
      "[128, 1, 1], \"est. achieved occupancy %%\": 12}},\n",
      kOps[i % 5], cpu_ts, 9.0, static_cast<unsigned long long>(i), static_cast<unsigned long long>(i),
      static_cast<unsigned long long>(i), launch_ts, static_cast<unsigned long long>(i),
      static_cast<unsigned long long>(i), static_cast<unsigned long long>(i), launch_ts,
      static_cast<unsigned long long>(i), stream, gpu_ts, kernel, stream, gpu_ts, dur,
      static_cast<unsigned long long>(i), stream, static_cast<unsigned long long>(i));
  out.append(buf, static_cast<std::size_t>(n));
  t += comm ? 4.0 : 11.0;  // comm kernels overlap the next compute kernel
}

void generate(const std::string& path, std::uint64_t target_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  std::string out =
      "{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [{\"id\": 0, \"name\": \"NVIDIA H100\"}],\n"
      "  \"traceEvents\": [\n"
      "  {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 0, \"tid\": 7, \"args\": {\"name\": \"stream 7\"}},\n";
  std::uint64_t written = 0, i = 0;
  double t = 1733140000000000.0;
  while (written + out.size() < target_bytes) {
    append_block(out, i++, t);
    if (out.size() > (1u << 20)) {
      written += std::fwrite(out.data(), 1, out.size(), f);
      out.clear();
    }
  }
  out += "  {\"ph\": \"i\", \"cat\": \"cpu_instant_event\", \"name\": \"end\", \"pid\": 81234, "
         "\"tid\": 81234, \"ts\": 1, \"s\": \"t\"}\n  ],\n  \"traceName\": \"synthetic\"\n}\n";
  std::fwrite(out.data(), 1, out.size(), f);
  if (std::fclose(f) != 0) throw std::runtime_error("write failed: " + path);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;  // kB on Linux
}

// Runs fn in a forked child; the child prints one result row.
template <class Fn>
void measure(Fn fn) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      rc = 1;
    }
    std::fflush(stdout);
    _exit(rc);
  }
  int status = 0;
  waitpid(pid, &status, 0);
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// MB/s by wall clock and by CPU time of the reading process (the machine may be shared; the CPU
// rate is what one free core would give).
void row(const char* reader, double file_mb, double seconds, double cpu_s, std::uint64_t spans,
         double base_mb) {
  const double peak = peak_rss_mb();
  std::printf("%-28s %8.1f %8.2f %8.1f %8.1f %9llu %8.1f %8.1f %8.2f\n", reader, file_mb, seconds,
              file_mb / seconds, file_mb / cpu_s, static_cast<unsigned long long>(spans), base_mb,
              peak, (peak - base_mb) / file_mb);
}

void sax(const std::string& path, bool cpu_ops, const char* label) {
  measure([&] {
    const double base = peak_rss_mb(), cpu0 = cpu_seconds();
    ht::traces::ReadOptions options;
    options.include_cpu_ops = cpu_ops;
    ht::traces::ReadStats stats;
    const auto t = ht::traces::read_chrome_trace(path, options, stats);
    row(label, stats.bytes / 1e6, stats.seconds, cpu_seconds() - cpu0, t.spans.size(), base);
  });
}

// The same reader on the file slurped into memory: what streaming saves (memory) and costs (speed).
void in_memory(const std::string& path) {
  measure([&] {
    const double base = peak_rss_mb(), cpu0 = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    std::string text(fs::file_size(path), '\0');
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(text.data(), 1, text.size(), f) != text.size()) throw std::runtime_error("read");
    std::fclose(f);
    const auto t = ht::traces::read_chrome_trace_string(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row("ht sax, file in memory", text.size() / 1e6, s, cpu_seconds() - cpu0, t.spans.size(), base);
  });
}

void dom(const std::string& path) {
  measure([&] {
    const double base = peak_rss_mb(), cpu0 = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    std::ifstream in(path, std::ios::binary);
    const nlohmann::json doc = nlohmann::json::parse(in);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    row("nlohmann DOM parse (peer)", fs::file_size(path) / 1e6, s, cpu_seconds() - cpu0,
        doc["traceEvents"].size(), base);
  });
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 300, dom_mb = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mb") == 0) mb = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--dom-mb") == 0) dom_mb = std::atof(argv[i + 1]);
  }
  const fs::path dir = fs::temp_directory_path() / ("ht_bench_trace_read_" + std::to_string(getpid()));
  fs::create_directories(dir);
  int rc = 0;
  try {
    const std::string big = (dir / "big.json").string(), small = (dir / "small.json").string();
    std::fprintf(stderr, "generating %.0f MB and %.0f MB synthetic Kineto traces in %s\n", mb, dom_mb,
                 dir.string().c_str());
    generate(big, static_cast<std::uint64_t>(mb * 1e6));
    generate(small, static_cast<std::uint64_t>(dom_mb * 1e6));
    std::printf("%-28s %8s %8s %8s %8s %9s %8s %8s %8s\n", "reader", "file MB", "wall s",
                "MB/s", "MB/cpu-s", "spans", "base MB", "peak MB", "RSS/file");
    sax(big, false, "ht sax (GPU activity)");
    sax(big, true, "ht sax (+ CPU ops)");
    sax(small, false, "ht sax (GPU activity)");
    in_memory(small);
    dom(small);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    rc = 1;
  }
  fs::remove_all(dir);
  return rc;
}
