// Depth-checked JSON parsing (see json_input.hpp).
#include "ht/io/json_input.hpp"

#include <string>
#include <unordered_set>
#include <vector>

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
  // A key given twice in one object would silently keep the last value ("hidden": 4096,
  // "hidden": 8 simulated hidden 8): refused, naming the key. One set of keys per open object,
  // reused across objects at the same depth.
  std::vector<std::unordered_set<std::string>> keys;
  std::vector<bool> is_object;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      is_object.push_back(event == E::object_start);
      if (keys.size() < is_object.size()) keys.resize(is_object.size());
      keys[is_object.size() - 1].clear();
    } else if (event == E::object_end || event == E::array_end) {
      if (!is_object.empty()) is_object.pop_back();
    } else if (event == E::key && !is_object.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!keys[is_object.size() - 1].insert(key).second)
        throw IoError(IoErrorCode::BadJson, std::string(source) + " gives the key \"" +
                                                (key.size() > 40 ? key.substr(0, 40) + "..." : key) +
                                                "\" twice in one object (which one is meant?)");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
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
