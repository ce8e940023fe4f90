// Minimal JSON text output for the writers (internal): strings escaped as JSON requires, with
// invalid UTF-8 bytes replaced by U+FFFD so the output always parses.
#pragma once

#include <string>
#include <string_view>

namespace ht::traces::detail {

void append_json_string(std::string& out, std::string_view text);

}  // namespace ht::traces::detail
