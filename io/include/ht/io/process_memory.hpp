// How much memory this process may still use, so that a run that cannot fit (training a model
// too large for the machine, replaying a plan too large to hold) is refused up front with its
// estimate instead of being killed by the kernel part way through.
#pragma once

namespace ht::io {

// The smaller of the machine's physical memory and what the address-space limit (ulimit -v)
// leaves after what this process already maps, in bytes.
double available_memory_bytes();

}  // namespace ht::io
