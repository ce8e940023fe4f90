// JSON input with limits: the nesting depth is checked on the text before nlohmann parses it, so
// "[[[[..." a hundred thousand levels deep is refused in one linear pass instead of overflowing the
// stack of a recursive copy, comparison or dump later on. Messages name the source.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ht::io {

// Deeper than any file the project reads (a counterexample nests 4 levels, a cost file 3).
inline constexpr int kJsonDepthLimit = 64;

// `source` names the input in messages, e.g. "model file 'm.json'". Throws IoError(BadJson).
void check_json_depth(std::string_view text, std::string_view source, int max_depth = kJsonDepthLimit);
nlohmann::json parse_json(std::string_view text, std::string_view source, int max_depth = kJsonDepthLimit);
// read_input_file + parse_json; `what` is the role ("cost model").
nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes, std::string_view what,
                              int max_depth = kJsonDepthLimit);

// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace ht::io
