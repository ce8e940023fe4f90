// Training data for the engine: byte-level tokens (vocabulary 256) of a real text, and the
// batches drawn from it. Batch k of a run depends only on (seed, k), so a resumed run sees the
// same batches as an uninterrupted one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ht/engine/model.hpp"

namespace ht::engine {

struct TextCorpus {
  std::string source;              // file path, or "builtin:default.txt"
  std::vector<std::uint8_t> bytes;
};

// The text shipped in data/default.txt, compiled into the library.
std::string_view builtin_text();

// path non-empty: that file (EngineError(Io) if unreadable). Empty: the first readable of the
// OS-provided license texts (/usr/share/common-licenses/GPL-3, then Apache-2.0), else the builtin.
TextCorpus load_corpus(const std::string& path);

// B windows of seq + 1 bytes at offsets drawn from Rng(seed, "batch/<step>"): tokens are the
// first seq bytes, targets the last seq. Throws EngineError(BadInput) if the text is too short.
Batch sample_batch(const TextCorpus& corpus, int batch, int seq, std::uint64_t seed,
                   std::int64_t step);

}  // namespace ht::engine
