// One timeline model for the engine's measurements, the twin's predictions and imported
// profiles: devices (GPUs / ranks) with streams, and spans on them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ht::traces {

enum class Role { Compute, Comm, Other };

// Spelling of a role in files and reports ("compute", "comm", "other").
inline std::string_view to_string(Role role) {
  switch (role) {
    case Role::Compute: return "compute";
    case Role::Comm: return "comm";
    case Role::Other: return "other";
  }
  return "other";
}
inline std::optional<Role> role_from_string(std::string_view text) {
  if (text == "compute") return Role::Compute;
  if (text == "comm") return Role::Comm;
  if (text == "other") return Role::Other;
  return std::nullopt;
}

struct Span {
  std::string name;
  std::string category;   // slot or kernel class, e.g. "dispatch", "pre_dispatch", "nccl"
  double start_s = 0;     // seconds from the timeline origin
  double duration_s = 0;
  int device = 0;         // GPU / rank
  int stream = 0;         // stream id on that device
  Role role = Role::Compute;
  std::map<std::string, std::string> args;  // microbatch, layer, slot, phase, bytes, ...
  double end_s() const { return start_s + duration_s; }
  bool operator==(const Span&) const = default;
};

struct StreamInfo {
  int device = 0;
  int stream = 0;
  std::string name;       // "compute", "comm", "stream 7"
  Role role = Role::Compute;
  bool operator==(const StreamInfo&) const = default;
};

struct Timeline {
  std::string source;     // "twin", "engine", "kineto", ...
  std::vector<StreamInfo> streams;
  std::vector<Span> spans;
  std::map<std::string, std::string> metadata;  // platform, throttle parameters, config, ...
  // Exact equality: a timeline written by write_chrome_trace and read back compares equal.
  bool operator==(const Timeline&) const = default;
};

}  // namespace ht::traces
