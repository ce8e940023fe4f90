// Physical memory and the address-space limit (see process_memory.hpp).
#include "ht/io/process_memory.hpp"

#include <algorithm>
#include <fstream>

#include <sys/resource.h>
#include <unistd.h>

namespace ht::io {

double available_memory_bytes() {
  double available = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGESIZE));
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    // What the address-space limit leaves after what this process already maps (libraries, stacks).
    double mapped = 0;
    std::ifstream statm("/proc/self/statm");
    if (statm >> mapped) mapped *= double(::sysconf(_SC_PAGESIZE));
    available = std::min(available, std::max(0.0, double(limit.rlim_cur) - mapped));
  }
  return available;
}

}  // namespace ht::io
