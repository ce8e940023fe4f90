// The NCCL process group of the GPU (process_group.hpp): one communicator over the launch's
// processes, each on GPU (its rank on the node) mod (the node's GPU count). MPI (make_mpi_group)
// only bootstraps it: process 0's ncclUniqueId reaches the others through one all-gather. Every
// transfer runs on the device executor's current stream (its comm stream), so it is ordered after
// the members' event chains like the one-device copies it replaces.
// Compiled with NCCL and MPI when CMake found both (HT_HAVE_NCCL_GROUP); otherwise
// make_nccl_group says what is missing.
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cuda/process_group.hpp"

#ifdef HT_HAVE_NCCL_GROUP
#include <nccl.h>

#include "dev_cuda.cuh"
#endif

namespace ht::engine::cuda {

#ifdef HT_HAVE_NCCL_GROUP
namespace {

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(rc));
}

class NcclGroup final : public ProcessGroup {
 public:
  explicit NcclGroup(std::unique_ptr<ProcessGroup> boot) : boot_(std::move(boot)) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
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
    if (boot_->process() == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::vector<double> mine(sizeof id.internal);
    for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<unsigned char>(id.internal[i]);
    const std::vector<double> all = boot_->all_gather(mine);
    for (std::size_t i = 0; i < mine.size(); ++i) id.internal[i] = static_cast<char>(static_cast<unsigned char>(all[i]));
    nccl_check(ncclCommInitRank(&comm_, boot_->processes(), id, boot_->process()), "ncclCommInitRank");
  }
  ~NcclGroup() override {
    if (!comm_) return;
    if (std::uncaught_exceptions() == 0)
      ncclCommDestroy(comm_);
    else
      ncclCommAbort(comm_);
  }
  std::string name() const override { return "nccl"; }
  int process() const override { return boot_->process(); }
  int processes() const override { return boot_->processes(); }
  void begin() override { nccl_check(ncclGroupStart(), "ncclGroupStart"); }
  void send(const float* data, std::size_t n, int peer) override {
    if (n) nccl_check(ncclSend(data, n, ncclFloat, peer, comm_, stream()), "ncclSend");
  }
  void recv(float* data, std::size_t n, int peer) override {
    if (n) nccl_check(ncclRecv(data, n, ncclFloat, peer, comm_, stream()), "ncclRecv");
  }
  void end() override { nccl_check(ncclGroupEnd(), "ncclGroupEnd"); }
  std::vector<double> all_gather(const std::vector<double>& mine) override {
    const std::size_t n = mine.size(), p = static_cast<std::size_t>(processes());
    std::vector<double> all(n * p);
    if (n == 0) return all;
    double* in = dev::Cuda::alloc<double>(n);
    double* out = dev::Cuda::alloc<double>(n * p);
    dev::Cuda::upload(in, mine.data(), n);  // stream-ordered, waits for the copy
    nccl_check(ncclAllGather(in, out, n, ncclDouble, comm_, stream()), "ncclAllGather");
    dev::Cuda::download(all.data(), out, n * p);  // on the same stream: after the all-gather
    dev::Cuda::release(in);
    dev::Cuda::release(out);
    return all;
  }

 private:
  static cudaStream_t stream() { return dev::CudaContext::get().stream(); }
  std::unique_ptr<ProcessGroup> boot_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group() { return std::make_unique<NcclGroup>(make_mpi_group()); }
#else
std::unique_ptr<ProcessGroup> make_nccl_group() {
  throw std::runtime_error("this build has no NCCL process group (it needs NCCL and MPI at configure time)");
}
#endif

}  // namespace ht::engine::cuda
