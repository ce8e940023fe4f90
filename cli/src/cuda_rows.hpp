// The CUDA side of the CLI (`verify --backend cuda`, `train --backend cuda`): the probe and the
// CPU-vs-CUDA rows, kept out of the subcommand files so they stay thin.
#pragma once

namespace ht::cli {

// True when a CUDA GPU is usable; otherwise prints the one line
// "hybrid-twin: no usable CUDA GPU: <reason>" to stderr and returns false (callers exit 2).
bool cuda_usable_or_say_why();

// `hybrid-twin verify --backend cuda`: one `cpu_vs_cuda` row per Backend operation, as a table or
// (json_out) the JSON list of the CPU rows' keys. Exit code: 2 without a usable GPU, 1 when a row
// fails, else 0.
int verify_cpu_vs_cuda(bool json_out);

}  // namespace ht::cli
