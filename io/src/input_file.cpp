// Bounded regular-file input (see input_file.hpp).
#include "ht/io/input_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ht/io/error.hpp"

namespace ht::io {

std::string format_bytes(std::uint64_t bytes) {
  char text[64];
  if (bytes >= kGiB && bytes % kGiB == 0) std::snprintf(text, sizeof text, "%llu GiB", static_cast<unsigned long long>(bytes / kGiB));
  else if (bytes >= kGiB) std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / kGiB);
  else if (bytes >= kMiB && bytes % kMiB == 0) std::snprintf(text, sizeof text, "%llu MiB", static_cast<unsigned long long>(bytes / kMiB));
  else if (bytes >= kMiB) std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / kMiB);
  else std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  return text;
}

InputFile::InputFile(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what)
    : limit_(max_bytes), path_(path.string()), what_(what) {
  if (path_.empty()) throw IoError(IoErrorCode::Open, "no " + what_ + " given (empty path)");
  // O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one; the
  // fstat below then refuses it. It does not change reads of a regular file.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0)
    throw IoError(IoErrorCode::Open, "cannot open " + what_ + " " + quote_path(path_) + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw IoError(IoErrorCode::Open, "cannot open " + what_ + " " + quote_path(path_) + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw IoError(IoErrorCode::NotRegular,
                  what_ + " " + quote_path(path_) + " is " + kind_of(st.st_mode) + ", not a regular file");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ > limit_) {
    ::close(fd_);
    throw IoError(IoErrorCode::TooLarge, what_ + " " + quote_path(path_) + " has " + format_bytes(size_) +
                                             ", more than the limit of " + format_bytes(limit_));
  }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read(void* buffer, std::size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, buffer, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw IoError(IoErrorCode::Read, "cannot read " + what_ + " " + quote_path(path_) + ": " + std::strerror(errno));
    consumed_ += static_cast<std::uint64_t>(got);
    if (consumed_ > limit_)
      throw IoError(IoErrorCode::TooLarge, what_ + " " + quote_path(path_) + " grew past the limit of " +
                                               format_bytes(limit_) + " while it was read");
    return static_cast<std::size_t>(got);
  }
}

void InputFile::read_at(std::uint64_t offset, void* buffer, std::size_t n) {
  auto* out = static_cast<char*>(buffer);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw IoError(IoErrorCode::Read, "cannot read " + what_ + " " + quote_path(path_) + ": " + std::strerror(errno));
    if (got == 0)
      throw IoError(IoErrorCode::Read, what_ + " " + quote_path(path_) + " ended early (truncated while it was read?)");
    out += got;
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::size_t>(got);
  }
}

std::string InputFile::read_all() {
  std::string text;
  text.reserve(static_cast<std::size_t>(size_));
  char chunk[1 << 16];
  for (std::size_t got; (got = read(chunk, sizeof chunk)) > 0;) text.append(chunk, got);
  return text;
}

std::string read_input_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what) {
  InputFile file(path, max_bytes, what);
  return file.read_all();
}

}  // namespace ht::io
