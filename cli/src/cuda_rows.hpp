// The CUDA side of the CLI (`verify --backend cuda`, `train --backend cuda`): the probe and the
// CPU-vs-CUDA rows, kept out of the subcommand files so they stay thin.
#pragma once

#include <string>
#include <vector>

namespace ht::cli {

// One row of `hybrid-twin verify`, for every backend.
struct VerifyRow {
  std::string pair, config;
  double max_abs_diff = 0;
  bool bitwise = false;
  std::string verdict;  // pass | fail | skip
  std::string note;
};
// Prints rows as a table or (json_out) a JSON list; returns 1 when a row failed, else 0.
int print_verify_rows(const std::vector<VerifyRow>& rows, bool json_out);

// True when a CUDA GPU is usable; otherwise prints the one line
// "hybrid-twin: no usable CUDA GPU: <reason>" to stderr and returns false (callers exit 2).
bool cuda_usable_or_say_why();

// `hybrid-twin verify --backend cuda`: one `cpu_vs_cuda_layer` row per CUDA layer quantity, the
// whole-model and executor rows, as a table or
// (json_out) the JSON list of the CPU rows' keys. Exit code: 2 without a usable GPU, 1 when a row
// fails, else 0.
int verify_cpu_vs_cuda(bool json_out);
// `hybrid-twin verify --backend cuda-host`: the CUDA layers' rows with the layer code run on the
// host emulation of the device (engine::cuda::compare_layers_host). Exit 1 when a row fails.
int verify_cuda_layers_on_host(bool json_out);

}  // namespace ht::cli
