// Atomic file output for everything ht::traces writes (internal): the content goes to a
// temporary file next to the target, which is renamed over the target only once it is complete,
// so a reader never sees half a trace.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace ht::traces::detail {

// TraceError (Io) when the directory is not writable, the write fails or the rename fails; the
// temporary file is removed in every failure case.
void write_atomically(const std::string& path, const std::function<void(std::ostream&)>& body);

}  // namespace ht::traces::detail
