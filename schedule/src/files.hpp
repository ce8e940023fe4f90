// Internal: the schedule library's files (model JSON, plan JSON) read and written through ht::io,
// with its errors re-thrown as ScheduleError(Io) so callers see the module's one error type.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ht/schedule/error.hpp"

namespace ht::schedule::detail {

// Bounded (ht::io::kJsonFileLimit) regular file, depth-checked JSON; `what` names it ("model file").
// Parse errors come back as ScheduleError(code) naming the file.
std::string read_text(const std::filesystem::path& path, std::string_view what);
nlohmann::json read_json(const std::filesystem::path& path, std::string_view what, ErrorCode bad_json);
// Parses text with the depth limit; ScheduleError(code) "<what> is not valid JSON: ...".
nlohmann::json parse_json(std::string_view text, std::string_view what, ErrorCode bad_json);
void write_text(const std::filesystem::path& path, std::string_view what, std::string_view text);

}  // namespace ht::schedule::detail
