// Whole-file read and atomic write (temp file in the same folder + rename), shared by the plan and
// model-file savers so a crash never leaves a half-written file behind.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace ht::schedule::detail {

std::string read_text_file(const std::filesystem::path& path);                   // throws Io
void write_file_atomically(const std::filesystem::path& path, std::string_view text);  // throws Io

}  // namespace ht::schedule::detail
