// Safetensors files, written and read by our own code: 8-byte little-endian header length, a JSON
// header {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the raw little-endian data. Checkpoints store parameters and optimizer
// moments in this format so PyTorch (safetensors.torch.load_file) reads them directly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/tensor.hpp"

namespace ht::io {
class InputFile;
}

namespace ht::engine {

struct SafetensorsFile {
  std::map<std::string, Tensor<float>> tensors;
  std::map<std::string, std::string> metadata;
};

// What was written: the file's size and FNV-1a 64 hash (hex), computed from the bytes on their way
// out, so a checkpoint manifest needs no second pass over the file.
struct WrittenFile {
  std::uint64_t bytes = 0;
  std::string fnv1a64;
};

// Writes atomically through ht::io (a temporary file beside path, fsync'ed, renamed over it; a
// non-regular target is refused). Tensors are laid out in name order. Throws EngineError(Io) on
// failure, or ht::io::IoError(Interrupted) when a deferred SIGINT/SIGTERM stopped the write.
WrittenFile write_safetensors(const std::string& path,
                              const std::vector<std::pair<std::string, const Tensor<float>*>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// FNV-1a 64 over bytes, continued from `state` (start with kFnvOffset).
inline constexpr std::uint64_t kFnvOffset = 0xcbf29ce484222325ull;
std::uint64_t fnv1a_update(std::uint64_t state, const void* bytes, std::size_t n);
std::string fnv1a_hex(std::uint64_t state);

// Default limit of read_safetensors: what one file may hold before a caller that knows better
// (a checkpoint knows its model's size) gives a tighter one.
inline constexpr std::uint64_t kSafetensorsFileLimit = std::uint64_t{16} << 30;

// Reads and validates everything before returning: header length within the file, JSON syntax,
// dtype F32 only, shapes of non-negative integers, data_offsets matching the shape's byte size,
// inside the data section, non-overlapping, and covering it exactly. Any violation throws
// EngineError(BadCheckpoint) naming the file and the problem. Only a regular file of at most
// max_bytes is opened (ht::io): a directory, FIFO or device is refused before a byte is read.
SafetensorsFile read_safetensors(const std::string& path, std::uint64_t max_bytes = kSafetensorsFileLimit);
// The same on a file already open (a checkpoint hashes it first); ht::io::IoError on read errors.
SafetensorsFile read_safetensors(io::InputFile& file);

}  // namespace ht::engine
