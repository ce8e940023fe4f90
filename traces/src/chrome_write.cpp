// Timeline -> Chrome-trace JSON (our own format, see chrome.hpp). Written by hand rather than
// through nlohmann::json so that a timeline of millions of spans streams out without a second
// in-memory copy, and so that times carry the exact decimal text of decimal_time.hpp.
#include <cmath>
#include <ostream>
#include <set>
#include <sstream>
#include <utility>

#include "output.hpp"
#include "decimal_time.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/error.hpp"
#include "json_text.hpp"

namespace ht::traces {

namespace {

void check_finite(double value, const char* what, const Span& span) {
  if (!std::isfinite(value))
    throw TraceError(TraceErrorCode::Range,
                     std::string("cannot write span '") + span.name + "': " + what +
                         " is not finite");
}

void append_int(std::string& out, long long v) { out += std::to_string(v); }

void write_events(const Timeline& timeline, std::ostream& os) {
  std::string out;
  out.reserve(1 << 20);
  auto flush = [&](bool force) {
    if (force || out.size() >= (1u << 20)) {
      os.write(out.data(), static_cast<std::streamsize>(out.size()));
      out.clear();
    }
  };

  out += "{\"otherData\":{\"generator\":\"hybrid-twin\",\"format\":1,\"source\":";
  detail::append_json_string(out, timeline.source);
  out += ",\"metadata\":{";
  bool first = true;
  for (const auto& [key, value] : timeline.metadata) {
    if (!first) out.push_back(',');
    first = false;
    detail::append_json_string(out, key);
    out.push_back(':');
    detail::append_json_string(out, value);
  }
  out += "}},\n\"displayTimeUnit\":\"ns\",\n\"traceEvents\":[\n";

  // One process per device; streams keep the order of Timeline::streams (the reader restores
  // exactly that list), and thread_sort_index keeps Perfetto's lanes in stream order.
  std::set<int> devices;
  for (const StreamInfo& s : timeline.streams) devices.insert(s.device);
  for (const Span& s : timeline.spans) devices.insert(s.device);
  first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int d : devices) {
    sep();
    out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":";
    append_int(out, d);
    out += ",\"tid\":0,\"args\":{\"name\":\"device ";
    append_int(out, d);
    out += "\"}}";
  }
  for (const StreamInfo& s : timeline.streams) {
    sep();
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":";
    append_int(out, s.device);
    out += ",\"tid\":";
    append_int(out, s.stream);
    out += ",\"args\":{\"name\":";
    detail::append_json_string(out, s.name);
    out += ",\"ht.role\":\"";
    out += to_string(s.role);
    out += "\"}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":";
    append_int(out, s.device);
    out += ",\"tid\":";
    append_int(out, s.stream);
    out += ",\"args\":{\"sort_index\":";
    append_int(out, s.stream);
    out += "}}";
  }
  for (const Span& s : timeline.spans) {
    check_finite(s.start_s, "start", s);
    check_finite(s.duration_s, "duration", s);
    if (s.duration_s < 0 || s.duration_s > kMaxTraceSeconds ||
        std::fabs(s.start_s) > kMaxTraceSeconds)
      throw TraceError(TraceErrorCode::Range, "cannot write span '" + s.name +
                                                  "': negative duration or a time beyond 1e9 s");
    if (s.args.count(std::string(kRoleArg)))
      throw TraceError(TraceErrorCode::Argument, "cannot write span '" + s.name +
                                                     "': arg key 'ht.role' is reserved");
    sep();
    out += "{\"ph\":\"X\",\"name\":";
    detail::append_json_string(out, s.name);
    out += ",\"cat\":";
    detail::append_json_string(out, s.category);
    out += ",\"pid\":";
    append_int(out, s.device);
    out += ",\"tid\":";
    append_int(out, s.stream);
    out += ",\"ts\":";
    out += detail::seconds_to_us_text(s.start_s);
    out += ",\"dur\":";
    out += detail::seconds_to_us_text(s.duration_s);
    out += ",\"args\":{\"ht.role\":\"";
    out += to_string(s.role);
    out += '"';
    for (const auto& [key, value] : s.args) {
      out.push_back(',');
      detail::append_json_string(out, key);
      out.push_back(':');
      detail::append_json_string(out, value);
    }
    out += "}}";
    flush(false);
  }
  out += "\n]}\n";
  flush(true);
}

}  // namespace

std::string to_chrome_trace_json(const Timeline& timeline) {
  std::ostringstream os;
  write_events(timeline, os);
  return std::move(os).str();
}

void write_chrome_trace(const Timeline& timeline, const std::string& path) {
  detail::write_output(path, "trace", [&](std::ostream& os) { write_events(timeline, os); });
}

}  // namespace ht::traces
