// Message helpers of ht::io (see error.hpp).
#include "ht/io/error.hpp"

#include <sys/stat.h>

namespace ht::io {

std::string quote_path(const std::string& path) {
  std::string out = "'";
  for (char c : path) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return out + "'";
}

const char* kind_of(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace ht::io
