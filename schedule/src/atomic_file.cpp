// Whole-file read and atomic write for ht::schedule files.
#include "ht/schedule/atomic_file.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include <unistd.h>

#include "ht/schedule/error.hpp"

namespace ht::schedule::detail {

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ScheduleError(ErrorCode::Io, "cannot open '" + path.string() + "' for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw ScheduleError(ErrorCode::Io, "cannot read '" + path.string() + "'");
  return buffer.str();
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  // The temp file sits next to the target so the rename stays within one file system.
  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ScheduleError(ErrorCode::Io, "cannot open '" + tmp.string() + "' for writing");
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      throw ScheduleError(ErrorCode::Io, "cannot write '" + tmp.string() + "'");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw ScheduleError(ErrorCode::Io,
                        "cannot rename '" + tmp.string() + "' to '" + path.string() + "': " +
                            ec.message());
  }
}

}  // namespace ht::schedule::detail
