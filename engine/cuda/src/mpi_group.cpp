// The launcher's environment and the MPI process group of the host emulation (process_group.hpp).
// Compiled with MPI when CMake found it (HT_HAVE_MPI); otherwise make_mpi_group says so.
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ht/engine/cuda/process_group.hpp"

#ifdef HT_HAVE_MPI
#include <dlfcn.h>
#include <mpi.h>
#endif

namespace ht::engine::cuda {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' && x >= 0 && x < (1L << 24) ? static_cast<int>(x) : fallback;
}

}  // namespace

Launch launch_from_env() {
  Launch l;
  for (const auto& [size, rank, local, local_size] :
       {std::tuple{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
        std::tuple{"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
        std::tuple{"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"}}) {
    const int s = env_int(size, 0);
    if (s < 1) continue;
    l.size = s;
    l.rank = env_int(rank, 0);
    l.local_rank = env_int(local, l.rank);
    l.local_size = env_int(local_size, l.size);
    return l;
  }
  return l;
}

#ifdef HT_HAVE_MPI
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(what) + ": " + std::string(text, static_cast<std::size_t>(len)));
}

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup() {
    // SimGrid's library defines the MPI API too (SMPI); in a program that links both, MPI_Init must
    // bind to the real MPI (cli/CMakeLists.txt orders the libraries), else it aborts in SMPI.
    Dl_info where{};
    if (dladdr(reinterpret_cast<void*>(&MPI_Init), &where) && where.dli_fname &&
        std::string(where.dli_fname).find("simgrid") != std::string::npos)
      throw std::runtime_error(std::string("MPI_Init binds to SimGrid's SMPI (") + where.dli_fname +
                               "), not to MPI: link the MPI library ahead of SimGrid");
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      check(MPI_Init(nullptr, nullptr), "MPI_Init");
      owns_mpi_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  ~MpiGroup() override {
    if (owns_mpi_ && std::uncaught_exceptions() == 0) MPI_Finalize();
  }
  std::string name() const override { return "mpi"; }
  int process() const override { return rank_; }
  int processes() const override { return size_; }
  void begin() override { pending_.clear(); }
  void send(const float* data, std::size_t n, int peer) override { post(const_cast<float*>(data), n, peer, true); }
  void recv(float* data, std::size_t n, int peer) override { post(data, n, peer, false); }
  void end() override {
    if (!pending_.empty())
      check(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    pending_.clear();
  }
  std::vector<double> all_gather(const std::vector<double>& mine) override {
    std::vector<double> all(mine.size() * static_cast<std::size_t>(size_));
    check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                        MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgather");
    return all;
  }

 private:
  // One tag for every transfer: MPI keeps messages between a pair in posting order.
  void post(float* data, std::size_t n, int peer, bool out) {
    if (n == 0) return;
    if (peer < 0 || peer >= size_ || peer == rank_) throw std::runtime_error("mpi group: no peer process " + std::to_string(peer));
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::runtime_error("mpi group: a transfer of " + std::to_string(n) + " floats exceeds MPI's int count");
    MPI_Request req;
    check(out ? MPI_Isend(data, static_cast<int>(n), MPI_FLOAT, peer, 0, MPI_COMM_WORLD, &req)
              : MPI_Irecv(data, static_cast<int>(n), MPI_FLOAT, peer, 0, MPI_COMM_WORLD, &req),
          out ? "MPI_Isend" : "MPI_Irecv");
    pending_.push_back(req);
  }

  bool owns_mpi_ = false;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> pending_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_mpi_group() { return std::make_unique<MpiGroup>(); }
#else
std::unique_ptr<ProcessGroup> make_mpi_group() {
  throw std::runtime_error("this build has no MPI (install libopenmpi-dev and reconfigure) to run processes under mpirun");
}
#endif

}  // namespace ht::engine::cuda
