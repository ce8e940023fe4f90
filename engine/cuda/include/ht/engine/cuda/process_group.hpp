// The processes of a multi-process launch (`mpirun -np P hybrid-twin train ...`) as the device
// executor sees them: P processes in a fixed order, each running a contiguous block of the plan's
// ranks (process p: ranks [p n/P, (p+1) n/P)); ranks of one process share its device and exchange
// rows by device copies, ranks of different processes through the group.
//
// Two groups, one per device policy, as the host emulation stands in for the GPU:
//   make_nccl_group()  the GPU: NCCL point-to-point and all-gather on the executor's comm stream,
//                      each process on GPU (its rank on the node) mod (the node's GPU count); MPI
//                      only bootstraps NCCL (broadcasts its unique id) and places the processes.
//   make_mpi_group()   the host emulation: MPI carries the data (host memory), so the executor's
//                      multi-process walk, its exchanges and its rank-order reductions run and are
//                      tested under mpirun on any machine.
// Both throw std::runtime_error with the reason when this build or this launch cannot make one.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace ht::engine::cuda {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual std::string name() const = 0;  // "mpi" or "nccl"
  virtual int process() const = 0;       // this process, 0 .. processes() - 1
  virtual int processes() const = 0;
  // Point-to-point transfers of device floats (host floats for the MPI group), posted between
  // begin() and end(): transfers between two processes are matched in the order they were posted.
  // end() orders them before what the executor's current stream does next (NCCL: a group on the
  // current stream; MPI: returns when they completed).
  virtual void begin() = 0;
  virtual void send(const float* data, std::size_t n, int peer) = 0;
  virtual void recv(float* data, std::size_t n, int peer) = 0;
  virtual void end() = 0;
  // Every process's `mine` (host values, the same count everywhere), concatenated in process order.
  // Waits for the current stream first.
  virtual std::vector<double> all_gather(const std::vector<double>& mine) = 0;
};

// The launcher's world as its environment describes it (OpenMPI, MPICH/PMI, Slurm): size 1 and
// rank 0 when the process was not started by a launcher; local_rank is the process's place among
// the local_size processes of its node (which GPU it takes).
struct Launch {
  int size = 1, rank = 0, local_rank = 0, local_size = 1;
};
Launch launch_from_env();

// One process driving several devices, a thread per device: endpoint i of the group belongs to the
// thread that runs device i (and the ranks of block i). Each thread calls join(i) itself, all of
// them concurrently (an NCCL communicator is made on its thread's device), and leave(i) when it is
// done with the device. abort() -- when one thread failed -- wakes every thread that waits in a
// transfer or an all-gather with an error instead of leaving it waiting.
//   make_host_fabric(n)  the host emulation: rows copied between the threads' memory ("threads");
//   make_nccl_fabric(n)  GPUs 0 .. n-1: one NCCL communicator per device, from one unique id
//                        ("nccl"; no MPI needed).
class ThreadFabric {
 public:
  virtual ~ThreadFabric() = default;
  virtual int size() const = 0;
  virtual std::unique_ptr<ProcessGroup> join(int i) = 0;
  virtual void leave(int i) = 0;
  virtual void abort() = 0;
};
std::unique_ptr<ThreadFabric> make_host_fabric(int threads);
std::unique_ptr<ThreadFabric> make_nccl_fabric(int devices);

// MPI_Init on construction (unless already initialised), MPI_Finalize on destruction -- not while
// an exception unwinds: a process that fails exits without finalising, so the launcher ends the
// job instead of leaving the other processes waiting.
std::unique_ptr<ProcessGroup> make_mpi_group();
std::unique_ptr<ProcessGroup> make_nccl_group();

}  // namespace ht::engine::cuda
