// One timeline model for the engine's measurements, the twin's predictions and imported
// profiles: devices (GPUs / ranks) with streams, and spans on them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ht::traces {

enum class Role { Compute, Comm, Other };

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
};

struct StreamInfo {
  int device = 0;
  int stream = 0;
  std::string name;       // "compute", "comm", "stream 7"
  Role role = Role::Compute;
};

struct Timeline {
  std::string source;     // "twin", "engine", "kineto", ...
  std::vector<StreamInfo> streams;
  std::vector<Span> spans;
  std::map<std::string, std::string> metadata;  // platform, throttle parameters, config, ...
};

}  // namespace ht::traces
