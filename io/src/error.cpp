// Message helpers of ht::io (see error.hpp).
#include "ht/io/error.hpp"

namespace ht::io {

std::string quote_path(const std::string& path) {
  std::string out = "'";
  for (char c : path) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return out + "'";
}

}  // namespace ht::io
