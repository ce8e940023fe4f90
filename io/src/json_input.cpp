// Depth-checked JSON parsing (see json_input.hpp).
#include "ht/io/json_input.hpp"

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"

namespace ht::io {

std::string json_error_text(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (const auto p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
  return what;
}

void check_json_depth(std::string_view text, std::string_view source, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw IoError(IoErrorCode::BadJson, std::string(source) + " nests JSON deeper than " +
                                                std::to_string(max_depth) + " levels (byte " + std::to_string(i) + ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, std::string_view source, int max_depth) {
  check_json_depth(text, source, max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw IoError(IoErrorCode::BadJson, std::string(source) + " is not valid JSON: " + json_error_text(e));
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what,
                              int max_depth) {
  const std::string text = read_input_file(path, max_bytes, what);
  return parse_json(text, std::string(what) + " " + quote_path(path.string()), max_depth);
}

}  // namespace ht::io
