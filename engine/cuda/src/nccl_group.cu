// NCCL on the GPU (process_group.hpp). make_nccl_group: one communicator over the launch's
// processes, each on GPU (its rank on the node) mod (the node's GPU count); MPI (make_mpi_group)
// only bootstraps it: process 0's ncclUniqueId reaches the others through one all-gather.
// make_nccl_fabric: one process driving GPUs 0 .. n-1 with a thread each, a communicator per GPU
// from one unique id (no MPI). Every transfer runs on the device executor's current stream (its comm
// stream), so it is ordered after the members' event chains like the one-device copies it replaces.
// Compiled with NCCL when CMake found it (HT_HAVE_NCCL; make_mpi_group says when the build has no MPI);
// otherwise the factories say what is missing.
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

#include "entry_points.hpp"
#include "ht/engine/cuda/process_group.hpp"

#ifdef HT_HAVE_NCCL
#include <nccl.h>

#include "dev_cuda.cuh"
#endif

namespace ht::engine::cuda {

#ifdef HT_HAVE_NCCL
namespace {

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(rc));
}

// One endpoint: a communicator of `n` ranks in which this one is `me`. With `boot` (the MPI group
// that bootstrapped it) the endpoint owns the communicator; a fabric's endpoint does not (the
// fabric destroys it when its thread leaves, or aborts it, and then every later call throws
// instead of using the aborted communicator).
class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(ncclComm_t comm, int me, int n, std::unique_ptr<ProcessGroup> boot,
            std::shared_ptr<const std::atomic<bool>> aborted = nullptr)
      : comm_(comm), me_(me), n_(n), boot_(std::move(boot)), aborted_(std::move(aborted)) {}
  ~NcclGroup() override {
    if (!boot_ || !comm_) return;
    if (std::uncaught_exceptions() == 0)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }
  std::string name() const override { return "nccl"; }
  int process() const override { return me_; }
  int processes() const override { return n_; }
  void begin() override {
    live();
    nccl_check(ncclGroupStart(), "ncclGroupStart");
  }
  void send(const float* data, std::size_t n, int peer) override {
    live();
    if (n) nccl_check(ncclSend(data, n, ncclFloat, peer, comm_, stream()), "ncclSend");
  }
  void recv(float* data, std::size_t n, int peer) override {
    live();
    if (n) nccl_check(ncclRecv(data, n, ncclFloat, peer, comm_, stream()), "ncclRecv");
  }
  void end() override {
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    live();
  }
  std::vector<double> all_gather(const std::vector<double>& mine) override {
    live();
    const std::size_t n = mine.size(), p = static_cast<std::size_t>(n_);
    std::vector<double> all(n * p);
    if (n == 0) return all;
    double* in = dev::Cuda::alloc<double>(n);
    double* out = dev::Cuda::alloc<double>(n * p);
    dev::Cuda::upload(in, mine.data(), n);  // stream-ordered, waits for the copy
    nccl_check(ncclAllGather(in, out, n, ncclDouble, comm_, stream()), "ncclAllGather");
    dev::Cuda::download(all.data(), out, n * p);  // on the same stream: after the all-gather
    dev::Cuda::release(in);
    dev::Cuda::release(out);
    live();  // an abort while waiting leaves garbage in `all`
    return all;
  }

 private:
  static cudaStream_t stream() { return dev::CudaContext::get().stream(); }
  void live() const {
    if (aborted_ && aborted_->load())
      throw std::runtime_error("device threads: another device failed; its NCCL communicators were aborted");
  }
  ncclComm_t comm_ = nullptr;
  int me_ = 0, n_ = 1;
  std::unique_ptr<ProcessGroup> boot_;
  std::shared_ptr<const std::atomic<bool>> aborted_;
};

int device_count() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  return count;
}

// GPUs 0 .. n-1 of this process, a thread each: the communicators are made together on the
// constructing thread (ncclCommInitAll), so no device thread can be left inside a collective
// initialisation that another one never reaches; join(i) puts thread i on GPU i with communicator
// i. abort() aborts every communicator once (a device thread then throws at its next call).
class NcclFabric final : public ThreadFabric {
 public:
  explicit NcclFabric(int n) : n_(n), comms_(static_cast<std::size_t>(n), nullptr) {
    const int count = device_count();
    if (n < 1 || n > count)
      throw std::runtime_error(std::to_string(n) + " devices asked of a process that sees " + std::to_string(count) + " GPU(s)");
    int current = 0;
    check(cudaGetDevice(&current), "cudaGetDevice");
    nccl_check(ncclCommInitAll(comms_.data(), n, nullptr), "ncclCommInitAll");  // devices 0 .. n-1
    check(cudaSetDevice(current), "cudaSetDevice");
  }
  ~NcclFabric() override {
    for (ncclComm_t c : comms_)
      if (c) ncclCommDestroy(c);
  }
  int size() const override { return n_; }
  std::unique_ptr<ProcessGroup> join(int i) override {
    dev::CudaContext::select_device(i);
    dev::CudaContext::get();
    std::lock_guard<std::mutex> lock(mu_);
    if (*aborted_) throw std::runtime_error("device threads: the fabric was aborted");
    return std::make_unique<NcclGroup>(comms_.at(static_cast<std::size_t>(i)), i, n_, nullptr, aborted_);
  }
  void leave(int i) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ncclComm_t& c = comms_.at(static_cast<std::size_t>(i));
      if (c) ncclCommDestroy(c);  // on its own thread, after its work; null once aborted
      c = nullptr;
    }
    dev::CudaContext::release_thread();
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_->exchange(true)) return;
    for (ncclComm_t& c : comms_) {
      if (c) ncclCommAbort(c);
      c = nullptr;
    }
  }

 private:
  int n_;
  std::mutex mu_;
  std::vector<ncclComm_t> comms_;
  std::shared_ptr<std::atomic<bool>> aborted_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

namespace gpu {
std::unique_ptr<ProcessGroup> make_nccl_group() {
  auto boot = make_mpi_group();
  const int count = device_count();
  if (count < 1) throw std::runtime_error("nccl group: no CUDA device on this node");
  // NCCL takes one GPU per process: ranks that share a GPU run in one process instead (--ep
  // without mpirun), exchanging rows by device copies.
  const Launch launch = launch_from_env();
  if (launch.local_size > count)
    throw std::runtime_error("nccl group: " + std::to_string(launch.local_size) + " processes on this node but " +
                             std::to_string(count) + " GPU(s); NCCL needs one GPU per process (run the ranks "
                             "sharing a GPU in one process: --ep without mpirun)");
  dev::CudaContext::select_device(launch.local_rank % count);
  dev::CudaContext::get();
  // The unique id as bytes in doubles (exact), process 0's kept.
  ncclUniqueId id{};
  if (boot->process() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<double> mine(sizeof id.internal);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<unsigned char>(id.internal[i]);
  const std::vector<double> all = boot->all_gather(mine);
  for (std::size_t i = 0; i < mine.size(); ++i) id.internal[i] = static_cast<char>(static_cast<unsigned char>(all[i]));
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, boot->processes(), id, boot->process()), "ncclCommInitRank");
  const int me = boot->process(), n = boot->processes();
  return std::make_unique<NcclGroup>(comm, me, n, std::move(boot));
}
std::unique_ptr<ThreadFabric> make_nccl_fabric(int devices) { return std::make_unique<NcclFabric>(devices); }
}  // namespace gpu
#else
namespace gpu {
std::unique_ptr<ProcessGroup> make_nccl_group() {
  throw std::runtime_error("this build has no NCCL (it was not found at configure time)");
}
std::unique_ptr<ThreadFabric> make_nccl_fabric(int) {
  throw std::runtime_error("this build has no NCCL (it was not found at configure time)");
}
}  // namespace gpu
#endif

}  // namespace ht::engine::cuda
