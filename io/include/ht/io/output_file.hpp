// Atomic output: every file the project writes (plans, model and cost JSON, traces, SVGs,
// calibrations, counterexamples, checkpoint files) goes through write_output_file. The content
// goes to a new temporary file beside the target, which replaces the target by rename only once
// it is complete, so a reader never sees half a file and a failed write leaves the old one. The
// target must be absent or a regular file (a symlink is followed to one and kept): a device, FIFO,
// directory or a symlink to one is refused rather than silently replaced. Errors name the user's
// path and the OS's reason (disk full, read-only, permission). SIGINT/SIGTERM remove the
// temporary file (interrupt.hpp).
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ht::io {

struct OutputOptions {
  // fsync the file before the rename and the folder after it, so the switch survives a power
  // loss (checkpoints); off for files that are cheap to write again.
  bool durable = false;
};

// Before any work: `path` is absent or a regular file (or a symlink to one) and its folder takes
// a new file (checked by creating and removing one). IoError naming `what` and the reason.
void check_output_file(const std::filesystem::path& path, std::string_view what);
// Two outputs of one command naming the same file (after resolving '.', '..' and symlinks) would
// leave only the last one written: refused, naming both. Empty paths (not asked) are skipped.
void check_distinct_outputs(const std::vector<std::pair<std::filesystem::path, std::string>>& outputs);
// The same for a folder of outputs (a checkpoint): created if missing (with its parents), must be
// a directory that takes a new file.
void check_output_directory(const std::filesystem::path& dir, std::string_view what);

// body writes the content; any exception it throws removes the temporary file and propagates.
void write_output_file(const std::filesystem::path& path, std::string_view what,
                       const std::function<void(std::ostream&)>& body, OutputOptions options = {});
void write_output_file(const std::filesystem::path& path, std::string_view what, std::string_view content,
                       OutputOptions options = {});

}  // namespace ht::io
