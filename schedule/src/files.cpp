// ht::io for the schedule library's files (see files.hpp).
#include "files.hpp"

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"
#include "ht/schedule/error.hpp"

namespace ht::schedule::detail {

nlohmann::json parse_json(std::string_view text, std::string_view what, ErrorCode bad_json) {
  try {
    return io::parse_json(text, what);
  } catch (const io::IoError& e) {
    throw ScheduleError(bad_json, e.what());
  }
}

std::string read_text(const std::filesystem::path& path, std::string_view what) {
  try {
    return io::read_input_file(path, io::kJsonFileLimit, what);
  } catch (const io::IoError& e) {
    throw ScheduleError(ErrorCode::Io, e.what());
  }
}

nlohmann::json read_json(const std::filesystem::path& path, std::string_view what, ErrorCode bad_json) {
  return parse_json(read_text(path, what), std::string(what) + " " + io::quote_path(path.string()), bad_json);
}

void write_text(const std::filesystem::path& path, std::string_view what, std::string_view text) {
  try {
    io::write_output_file(path, what, text);
  } catch (const io::IoError& e) {
    throw ScheduleError(ErrorCode::Io, e.what());
  }
}

}  // namespace ht::schedule::detail
