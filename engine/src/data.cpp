// Byte-level corpus loading and batch sampling (see data.hpp).
#include "ht/engine/data.hpp"

#include "ht/engine/error.hpp"
#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/engine/rng.hpp"

namespace ht::engine {

extern const unsigned char kBuiltinText[];
extern const std::size_t kBuiltinTextSize;

std::string_view builtin_text() {
  return {reinterpret_cast<const char*>(kBuiltinText), kBuiltinTextSize};
}

namespace {
// The whole text is held in memory as bytes; 1 GiB is far more than a byte-level toy run needs.
constexpr std::uint64_t kCorpusLimit = std::uint64_t{1} << 30;

void read_file(const std::string& path, std::vector<std::uint8_t>& out) {
  const std::string text = io::read_input_file(path, kCorpusLimit, "training text");
  out.assign(text.begin(), text.end());
}
}  // namespace

TextCorpus load_corpus(const std::string& path) {
  TextCorpus c;
  if (!path.empty()) {
    try {
      read_file(path, c.bytes);
    } catch (const io::IoError& e) {
      throw EngineError(ErrorCode::Io, e.what());
    }
    c.source = path;
    return c;
  }
  for (const char* os_text : {"/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"}) {
    try {
      read_file(os_text, c.bytes);
    } catch (const io::IoError&) {
      continue;  // not on this system: the next one, then the built-in text
    }
    if (c.bytes.size() > 1024) {
      c.source = os_text;
      return c;
    }
  }
  const auto text = builtin_text();
  c.bytes.assign(text.begin(), text.end());
  c.source = "builtin:default.txt";
  return c;
}

Batch sample_batch(const TextCorpus& corpus, int batch, int seq, std::uint64_t seed,
                   std::int64_t step) {
  if (batch < 1 || seq < 1) throw EngineError(ErrorCode::BadInput, "batch size and sequence length must be positive");
  if (corpus.bytes.size() < static_cast<std::size_t>(seq) + 1)
    throw EngineError(ErrorCode::BadInput, "training text '" + corpus.source + "' has " +
                                               std::to_string(corpus.bytes.size()) +
                                               " bytes, fewer than sequence length + 1 = " +
                                               std::to_string(std::int64_t{seq} + 1));
  Batch b{Tensor<int>({batch, seq}), Tensor<int>({batch, seq})};
  Rng rng(seed, "batch/" + std::to_string(step));
  const auto span = corpus.bytes.size() - static_cast<std::size_t>(seq);
  for (int i = 0; i < batch; ++i) {
    const auto off = static_cast<std::size_t>(rng.next_u64() % span);
    for (int j = 0; j < seq; ++j) {
      b.tokens[static_cast<std::size_t>(i * seq + j)] = corpus.bytes[off + static_cast<std::size_t>(j)];
      b.targets[static_cast<std::size_t>(i * seq + j)] = corpus.bytes[off + static_cast<std::size_t>(j) + 1];
    }
  }
  return b;
}

}  // namespace ht::engine
