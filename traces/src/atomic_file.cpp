// Temp file + rename; see atomic_file.hpp.
#include "atomic_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "ht/traces/error.hpp"

namespace ht::traces::detail {

void write_atomically(const std::string& path, const std::function<void(std::ostream&)>& body) {
  if (path.empty()) throw TraceError(TraceErrorCode::Io, "cannot write: empty output path");
  const std::string temp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out)
      throw TraceError(TraceErrorCode::Io,
                       "cannot write '" + path + "': " + std::strerror(errno));
    try {
      body(out);
    } catch (...) {
      out.close();
      std::remove(temp.c_str());
      throw;
    }
    out.flush();
    if (!out) {
      out.close();
      std::remove(temp.c_str());
      throw TraceError(TraceErrorCode::Io, "write to '" + path + "' failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) {
    std::remove(temp.c_str());
    throw TraceError(TraceErrorCode::Io, "cannot rename into '" + path + "': " + ec.message());
  }
}

}  // namespace ht::traces::detail
