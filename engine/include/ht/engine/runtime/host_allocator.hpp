// Host allocator settings for the CPU backend. The engine allocates activation buffers per node
// and frees them when the node's state is released; with glibc's defaults those buffers (above
// the 128 KiB mmap threshold, or in per-thread arenas that trim their tops) go back to the kernel
// and the next allocation page-faults them in again, zero-filled. On a 2-core machine that made
// 40 % of a training step kernel time and the main source of run-to-run jitter in node
// durations (a 1.4 ms node measured anywhere up to 9 ms), which the twin cannot model.
// keep_freed_host_memory() keeps freed memory in the process: one arena, no mmap for buffers, no
// trimming. Idempotent; a no-op off glibc.
#pragma once

namespace ht::engine::runtime {

void keep_freed_host_memory();

}  // namespace ht::engine::runtime
