// Internal: everything ht::traces writes goes through ht::io's atomic output; its errors come back
// as TraceError(Io) so callers see the module's one error type.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "ht/io/error.hpp"
#include "ht/io/output_file.hpp"
#include "ht/traces/error.hpp"

namespace ht::traces::detail {

inline void write_output(const std::string& path, const char* what, const std::function<void(std::ostream&)>& body) {
  try {
    io::write_output_file(path, what, body);
  } catch (const io::IoError& e) {
    throw TraceError(TraceErrorCode::Io, e.what());
  }
}

}  // namespace ht::traces::detail
