// The one exception type of ht::io: every input that cannot be opened, is not a regular file, is
// larger than its limit or is not valid JSON, and every output that cannot be written, surfaces as
// an IoError whose message names the file (as the user gave it), what it is for and the OS's
// reason. Modules re-throw it as their own typed error where their API promises one.
#pragma once

#include <stdexcept>
#include <string>

namespace ht::io {

enum class IoErrorCode {
  Open,         // missing file, no permission, unreadable folder
  NotRegular,   // a directory, FIFO, device, socket (or a symlink to one)
  TooLarge,     // larger than the reader's limit
  Read,         // the OS failed a read
  Write,        // the OS failed a write, an fsync or the final rename (disk full, read-only, ...)
  BadJson,      // not well-formed JSON, or nested deeper than the limit
  Interrupted,  // SIGINT/SIGTERM arrived while writing; the previous file is left as it was
};

class IoError : public std::runtime_error {
 public:
  IoError(IoErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  IoErrorCode code() const noexcept { return code_; }

 private:
  IoErrorCode code_;
};

// "'PATH'" quoted for messages, control characters replaced so a message stays on one line.
std::string quote_path(const std::string& path);

// "a FIFO", "a character device", ... for a st_mode that is not a regular file.
const char* kind_of(unsigned mode);

}  // namespace ht::io
