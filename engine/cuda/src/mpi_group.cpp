// The MPI process group of the host emulation (process_group.hpp), in its own library
// (ht_engine_mpi) that the engine opens only when a run asks for it (backends.cpp).
#include <dlfcn.h>
#include <mpi.h>

#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "entry_points.hpp"
#include "ht/engine/cuda/process_group.hpp"

namespace ht::engine::cuda {
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
    // SimGrid's library defines the MPI API too (SMPI); where a program maps SimGrid ahead of this
    // library (a test linking both), MPI_Init could bind to it and abort in SMPI: say so instead.
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

std::unique_ptr<ProcessGroup> make_group() { return std::make_unique<MpiGroup>(); }

}  // namespace
}  // namespace ht::engine::cuda

extern "C" __attribute__((visibility("default"))) const ht::engine::cuda::MpiEntryPoints* ht_engine_mpi_entry_points() {
  static const ht::engine::cuda::MpiEntryPoints table{sizeof(ht::engine::cuda::MpiEntryPoints),
                                                      &ht::engine::cuda::make_group};
  return &table;
}
