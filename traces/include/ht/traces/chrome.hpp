// Chrome-trace JSON in and out: the engine's and the twin's timelines are written here (they open
// in Perfetto and chrome://tracing) and real profiles (PyTorch profiler / Kineto, legacy autograd
// profiler, any Chrome trace) are read here into the one Timeline model.
//
// Our own files: ts/dur in microseconds, pid = device, tid = stream, process_name / thread_name
// metadata, "cat" = category, the role in args["ht.role"] and "otherData" = {generator, source,
// metadata}. Times are written as the exact decimal of the seconds value shifted by 10^6, so a
// file read back gives a bit-identical Timeline (operator==).
//
// Foreign files: GPU kernel / memcpy / memset events become spans on (args.device or pid,
// args.stream or tid); CPU ops (cat cpu_op / operator / user_annotation, or no cat at all as in
// the legacy autograd profiler) only with include_cpu_ops; everything else (flows, runtime calls,
// python frames, counters, instants) is skipped. Comm vs compute comes from comm_rules.hpp.
// Times are rebased so the earliest kept event starts in [0, 1) us (metadata "origin_us").
// Reading is one streaming SAX pass; only the kept spans are held in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ht/traces/timeline.hpp"

namespace ht::traces {

struct ReadOptions {
  std::optional<std::string> comm_regex;  // replaces default_comm_rules() for foreign files
  bool include_cpu_ops = false;
};

// What one read did, for the "read rate" line of the CLI and the benchmark.
struct ReadStats {
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::uint64_t events = 0;   // trace events seen (all phases)
  std::uint64_t spans = 0;    // kept as spans
  std::uint64_t skipped = 0;  // well-formed events that are not spans (flows, cpu ops, ...)
  double megabytes_per_second() const { return seconds > 0 ? bytes / 1e6 / seconds : 0; }
};

// Bound on |start| and duration of any span in a file, written or read: 1e9 s is 31 years, so a
// larger number is garbage rather than a time, and refusing it keeps the arithmetic sane.
inline constexpr double kMaxTraceSeconds = 1e9;

// Limits of one read: files up to 4 GiB (about 20 s at the reader's rate) and up to 10 million
// kept spans (a few GiB of memory); real profiles of a few steps are far below both.
inline constexpr std::uint64_t kMaxTraceBytes = std::uint64_t{4} << 30;
inline constexpr std::size_t kMaxTraceSpans = 10'000'000;

// Reserved arg key that carries Span::role in our files; Span::args may not use it.
inline constexpr std::string_view kRoleArg = "ht.role";

void write_chrome_trace(const Timeline& timeline, const std::string& path);  // atomic
std::string to_chrome_trace_json(const Timeline& timeline);

Timeline read_chrome_trace(const std::string& path, const ReadOptions& options = {});
Timeline read_chrome_trace(const std::string& path, const ReadOptions& options, ReadStats& stats);
// The whole reader on an in-memory document; the entry point for fuzz targets. Throws only
// TraceError for any input.
Timeline read_chrome_trace_string(std::string_view json, const ReadOptions& options = {});

}  // namespace ht::traces
