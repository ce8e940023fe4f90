// The launcher's environment (process_group.hpp): which process of how many this one is, as
// OpenMPI, MPICH/PMI or Slurm describe it. Needs no MPI library.
#include <cstdlib>
#include <tuple>

#include "ht/engine/cuda/process_group.hpp"

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

}  // namespace ht::engine::cuda
