// Bounded input: every file the project reads (model and cost JSON, plans, traces, platform XML,
// training text, checkpoints, counterexamples) is opened here. Only a regular file is accepted (a
// symlink is followed to one): a FIFO would block forever, /dev/zero never ends, a directory is no
// input. The file must also be at most the caller's limit, checked before the first byte is read
// and again while reading, so a file that grows meanwhile cannot run the reader out of memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ht::io {

inline constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
// Limit of the small JSON files (model dimensions, cost models, plans, manifests, counterexamples).
inline constexpr std::uint64_t kJsonFileLimit = 64 * kMiB;

// "64 MiB", "1.5 GiB": limits in messages.
std::string format_bytes(std::uint64_t bytes);

class InputFile {
 public:
  // `what` names the role in messages ("model file", "trace"). Throws IoError: Open, NotRegular,
  // TooLarge.
  InputFile(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::uint64_t size() const { return size_; }  // at open time
  const std::string& path() const { return path_; }
  // The next up to n bytes; 0 at the end. IoError Read on an OS error or when the file grew
  // past the limit since it was opened.
  std::size_t read(void* buffer, std::size_t n);
  // Exactly n bytes at offset; IoError Read when the file is shorter.
  void read_at(std::uint64_t offset, void* buffer, std::size_t n);
  // The rest of the file.
  std::string read_all();

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0, limit_ = 0, consumed_ = 0;
  std::string path_, what_;
};

// The whole file as bytes (text files, JSON).
std::string read_input_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what);

}  // namespace ht::io
