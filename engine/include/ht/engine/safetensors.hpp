// Safetensors files, written and read by our own code: 8-byte little-endian header length, a JSON
// header {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the raw little-endian data. Checkpoints store parameters and optimizer
// moments in this format so PyTorch (safetensors.torch.load_file) reads them directly.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/tensor.hpp"

namespace ht::engine {

struct SafetensorsFile {
  std::map<std::string, Tensor<float>> tensors;
  std::map<std::string, std::string> metadata;
};

// Writes atomically: a temporary file in the same directory, fsync'ed, then renamed over path.
// Tensors are laid out in name order. Throws EngineError(Io) on failure.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, const Tensor<float>*>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Reads and validates everything before returning: header length within the file, JSON syntax,
// dtype F32 only, shapes of non-negative integers, data_offsets matching the shape's byte size,
// inside the data section, non-overlapping, and covering it exactly. Any violation throws
// EngineError(BadCheckpoint) naming the file and the problem.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace ht::engine
