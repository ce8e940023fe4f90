// Bad input: malformed, truncated and hostile documents give a TraceError with a code and a
// one-line message, never a crash, a hang or a foreign exception.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ht/traces/chrome.hpp"
#include "ht/traces/error.hpp"
#include "trace_test_support.hpp"

using namespace ht::traces;
using ht::traces::test::fixture;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The code of the TraceError the document raises; fails the test on success or another type.
TraceErrorCode error_of(const std::string& doc, const ReadOptions& options = {}) {
  try {
    read_chrome_trace_string(doc, options);
  } catch (const TraceError& e) {
    const std::string message = e.what();
    CHECK_FALSE(message.empty());
    CHECK(message.find('\n') == std::string::npos);
    return e.code();
  }
  FAIL("no TraceError for: " << doc.substr(0, 200));
  return TraceErrorCode::Io;
}

std::string event(const std::string& fields) {
  return R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,)" + fields + "}]}";
}
}  // namespace

TEST_CASE("every truncation of a real profile is a parse error", "[errors]") {
  const std::string doc = slurp(fixture("kineto_gpu_two_devices.json"));
  const std::size_t complete = doc.rfind('}');
  REQUIRE(complete != std::string::npos);
  for (std::size_t n = 0; n < complete; n += 7)
    REQUIRE(error_of(doc.substr(0, n)) == TraceErrorCode::Parse);
  CHECK_NOTHROW(read_chrome_trace_string(doc.substr(0, complete + 1)));
}

TEST_CASE("documents that are JSON but not traces are schema errors", "[errors]") {
  CHECK(error_of("42") == TraceErrorCode::Schema);
  CHECK(error_of(R"("trace")") == TraceErrorCode::Schema);
  CHECK(error_of(R"({"a": 1})") == TraceErrorCode::Schema);
  CHECK(error_of(R"({"traceEvents": {}})") == TraceErrorCode::Schema);
  CHECK(error_of(R"({"traceEvents": [1, 2]})") == TraceErrorCode::Schema);
  CHECK(error_of("[[]]") == TraceErrorCode::Schema);
  CHECK(error_of(event(R"("ts":"12","dur":1)")) == TraceErrorCode::Schema);
  CHECK(error_of(event(R"("ts":12)")) == TraceErrorCode::Schema);   // X without dur
  CHECK(error_of(event(R"("dur":12)")) == TraceErrorCode::Schema);  // no ts
  CHECK(error_of(R"({"traceEvents":[{"ph":"X","name":"k","cat":"c","pid":0,"tid":0,"ts":1,"dur":1,
                   "args":{"ht.role":"bogus"}}]})") == TraceErrorCode::Schema);
  CHECK(error_of(std::string(100000, '[')) == TraceErrorCode::Schema);  // depth limit, no stack blowup
}

TEST_CASE("numbers a timeline cannot hold are range errors", "[errors]") {
  CHECK(error_of(event(R"("ts":0,"dur":-1)")) == TraceErrorCode::Range);
  CHECK(error_of(event(R"("ts":1e300,"dur":1)")) == TraceErrorCode::Range);
  CHECK(error_of(event(R"("ts":123456789012345678901234567890,"dur":1)")) == TraceErrorCode::Range);
  CHECK(error_of(event(R"("ts":0,"dur":1e200)")) == TraceErrorCode::Range);
  CHECK(error_of(R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":99999999999,"tid":7,"ts":0,"dur":1}]})") ==
        TraceErrorCode::Range);
  CHECK(error_of(R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":1.5,"tid":7,"ts":0,"dur":1}]})") ==
        TraceErrorCode::Range);
  // Overflowing doubles are rejected by the JSON layer itself.
  CHECK(error_of(event(R"("ts":1e400,"dur":1)")) == TraceErrorCode::Parse);
  // Tiny numbers are fine: they underflow to zero.
  CHECK(read_chrome_trace_string(event(R"("ts":1e-400,"dur":1e-400)")).spans.at(0).start_s == 0);
}

TEST_CASE("invalid text, regex and paths are typed errors", "[errors]") {
  CHECK(error_of("{\"traceEvents\":[{\"name\":\"\xff\xfe\"}]}") == TraceErrorCode::Parse);
  CHECK(error_of("{\"traceEvents\":[]} trailing") == TraceErrorCode::Parse);
  ReadOptions bad;
  bad.comm_regex = "([unclosed";
  CHECK(error_of(R"({"traceEvents":[]})", bad) == TraceErrorCode::Argument);
  try {
    read_chrome_trace("/nonexistent/dir/trace.json");
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK(e.code() == TraceErrorCode::Io);
    CHECK(std::string(e.what()).find("/nonexistent/dir/trace.json") != std::string::npos);
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THROWS_AS(read_chrome_trace(dir), TraceError);  // a directory, not a file
}

TEST_CASE("file errors name the file and the position", "[errors]") {
  const auto path = std::filesystem::temp_directory_path() / "ht_traces_truncated.json";
  {
    std::ofstream out(path);
    out << R"({"traceEvents":[{"ph":"X","name":"k","ts":1,)";
  }
  try {
    read_chrome_trace(path.string());
    FAIL("no error");
  } catch (const TraceError& e) {
    CHECK(e.code() == TraceErrorCode::Parse);
    const std::string m = e.what();
    CHECK(m.find(path.string()) != std::string::npos);
    CHECK(m.find("byte") != std::string::npos);
  }
  std::filesystem::remove(path);
}

TEST_CASE("arbitrary bytes and mutated profiles never escape as anything but TraceError",
          "[errors][property]") {
  const std::string doc = slurp(fixture("kineto_gpu_two_devices.json"));
  rc::prop("random bytes", [](const std::string& bytes) {
    try {
      read_chrome_trace_string(bytes);
    } catch (const TraceError&) {
    }
  });
  rc::prop("mutations of a real profile", [&doc] {
    std::string m = doc;
    const int edits = *rc::gen::inRange(1, 6);
    for (int i = 0; i < edits; ++i) {
      const std::size_t at = *rc::gen::inRange<std::size_t>(0, m.size());
      const char c = *rc::gen::element('{', '}', '[', ']', '"', ',', ':', '1', '-', 'e', '.', 'x', '\\');
      switch (*rc::gen::inRange(0, 3)) {
        case 0: m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        case 1: if (at < m.size()) m.erase(at, 1); break;
        default: if (at < m.size()) m[at] = c;
      }
    }
    try {
      const Timeline t = read_chrome_trace_string(m);
      for (const Span& s : t.spans) RC_ASSERT(s.duration_s >= 0);
    } catch (const TraceError&) {
    }
  });
}
