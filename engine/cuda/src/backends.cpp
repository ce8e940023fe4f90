// The engine's CUDA and MPI entry points (entry_points.hpp): each forwards to the backend library's
// table, which is opened on first use. A shared build finds libht_engine_cuda.so and
// libht_engine_mpi.so beside the engine's own library (or in ../lib of it, an installed layout) and
// opens them then, so `hybrid-twin pattern` or `simulate` never map cuBLAS, NCCL or MPI; a static
// build links the tables in (HT_CUDA_LINKED, HT_MPI_LINKED). Without the backend in the build, or
// when its library cannot be opened (a missing libcublas, say), the probe says why in one line and
// every other entry point throws that line.
#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include "entry_points.hpp"

namespace ht::engine {
namespace {

constexpr const char* kNoCuda = "this build has no CUDA backend (nvcc not found, or HT_ENABLE_CUDA=OFF, at configure time)";
constexpr const char* kNoMpi =
    "this build has no MPI (install libopenmpi-dev and reconfigure) to run processes under mpirun";

// The folder of the object this code is in (the engine's shared library, or the executable).
std::filesystem::path own_folder() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_folder), &info) || !info.dli_fname) return {};
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path(info.dli_fname).parent_path() : path.parent_path();
}

// Opens `file` beside this object (or in ../lib of it) and returns its table, or nullptr with
// `error` saying why; `file` null: the build has no such library, and `missing` is the reason.
template <class Table>
const Table* open_table(const char* file, const char* symbol, const char* missing, std::string& error) {
  if (!file) {
    error = missing;
    return nullptr;
  }
  const std::filesystem::path here = own_folder();
  std::filesystem::path found;
  for (const auto& candidate : {here / file, here.parent_path() / "lib" / file}) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) {
      found = candidate;
      break;
    }
  }
  if (found.empty()) {
    error = std::string("the library ") + file + " is not beside " + (here.empty() ? "the engine" : here.string()) +
            " (a build with it puts it there)";
    return nullptr;
  }
  void* handle = dlopen(found.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    error = "cannot load " + found.string() + ": " + (why ? why : "unknown error");
    return nullptr;
  }
  auto* entry = reinterpret_cast<const Table* (*)()>(dlsym(handle, symbol));
  const Table* table = entry ? entry() : nullptr;
  if (!table || table->size != sizeof(Table)) {
    error = found.string() + " is not this build's backend library (no matching " + symbol + ")";
    return nullptr;
  }
  return table;
}

#if defined(HT_CUDA_LIBRARY)
constexpr const char* kCudaFile = HT_CUDA_LIBRARY;
#else
constexpr const char* kCudaFile = nullptr;
#endif
#if defined(HT_MPI_LIBRARY)
constexpr const char* kMpiFile = HT_MPI_LIBRARY;
#else
constexpr const char* kMpiFile = nullptr;
#endif

const cuda::CudaEntryPoints* load_cuda([[maybe_unused]] std::string& error) {
#if defined(HT_CUDA_LINKED)
  return ht_engine_cuda_entry_points();
#else
  return open_table<cuda::CudaEntryPoints>(kCudaFile, "ht_engine_cuda_entry_points", kNoCuda, error);
#endif
}

const cuda::MpiEntryPoints* load_mpi([[maybe_unused]] std::string& error) {
#if defined(HT_MPI_LINKED)
  return ht_engine_mpi_entry_points();
#else
  return open_table<cuda::MpiEntryPoints>(kMpiFile, "ht_engine_mpi_entry_points", kNoMpi, error);
#endif
}

// A backend's table, opened once per process; a failure is remembered with its reason.
template <class Table, const Table* (*Load)(std::string&)>
const Table* opened(std::string& why) {
  static std::once_flag once;
  static const Table* table = nullptr;
  static std::string error;
  std::call_once(once, [] { table = Load(error); });
  why = error;
  return table;
}

template <class Table, const Table* (*Load)(std::string&)>
const Table& opened_or_throw() {
  std::string why;
  const Table* table = opened<Table, Load>(why);
  if (!table) throw std::runtime_error(why);
  return *table;
}

const cuda::CudaEntryPoints& cuda_or_throw() { return opened_or_throw<cuda::CudaEntryPoints, load_cuda>(); }
const cuda::MpiEntryPoints& mpi_or_throw() { return opened_or_throw<cuda::MpiEntryPoints, load_mpi>(); }

}  // namespace

CudaProbe cuda_probe() {
  std::string why;
  const auto* table = opened<cuda::CudaEntryPoints, load_cuda>(why);
  return table ? table->probe() : CudaProbe{false, why, ""};
}

KernelTable cuda::measure_kernel_table_cuda(const KernelBenchOptions& o) { return cuda_or_throw().measure_kernel_table(o); }

namespace cuda {

std::vector<LayerComparison> compare_layers_cuda(std::uint64_t seed, const LayerShape& shape) {
  return cuda_or_throw().compare_layers(seed, shape);
}
double measure_gemm_tflops_cuda(int n, int reps) { return cuda_or_throw().measure_gemm_tflops(n, reps); }
std::unique_ptr<DeviceExecutor> make_cuda_executor(const patterns::ParsedPattern& p, const ModelConfig& cfg,
                                                   std::uint64_t seed, schedule::Plan plan, DeviceExecutorOptions options) {
  return cuda_or_throw().make_executor(p, cfg, seed, std::move(plan), std::move(options));
}
std::unique_ptr<ProcessGroup> make_nccl_group() { return cuda_or_throw().make_nccl_group(); }
std::unique_ptr<ThreadFabric> make_nccl_fabric(int devices) { return cuda_or_throw().make_nccl_fabric(devices); }
std::unique_ptr<ProcessGroup> make_mpi_group() { return mpi_or_throw().make_group(); }

}  // namespace cuda
}  // namespace ht::engine
