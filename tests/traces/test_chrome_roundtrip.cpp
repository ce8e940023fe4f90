// Our own traces: write -> read gives the very same Timeline (operator==, bit for bit), the file
// is a Chrome trace Perfetto understands (checked with nlohmann::json as an independent reader),
// and it is written atomically.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "ht/traces/chrome.hpp"
#include "ht/traces/error.hpp"

using namespace ht::traces;
namespace fs = std::filesystem;

namespace {
Timeline twin_like_timeline() {
  Timeline t;
  t.source = "twin";
  t.metadata = {{"platform", "2x8 H100, 400 Gb/s"}, {"pattern", "M[*E]M[*E]-"}};
  t.streams = {{0, 0, "compute", Role::Compute}, {0, 1, "comm", Role::Comm},
               {1, 0, "compute", Role::Compute}, {1, 1, "comm", Role::Comm}};
  t.spans = {
      {"pre_dispatch L1 mb0 F", "pre_dispatch", 0.0, 1.25e-4, 0, 0, Role::Compute,
       {{"microbatch", "0"}, {"layer", "1"}, {"slot", "pre_dispatch"}, {"phase", "F"}}},
      {"dispatch L1 mb0 F", "dispatch", 1.25e-4, 3.3e-5, 0, 1, Role::Comm,
       {{"microbatch", "0"}, {"bytes", "4194304"}, {"phase", "F"}}},
      {"mlp L1 mb0 F", "mlp", 0.1 + 0.2, 1.0 / 3.0, 1, 0, Role::Compute, {}},
      {"idle \"quoted\" \\ \n\ttab \xC3\xA9 <tag>", "", -2.5e-7, 0, 1, 1, Role::Other, {{"k", ""}}},
  };
  return t;
}
}  // namespace

TEST_CASE("a twin timeline survives write and read bit for bit", "[chrome]") {
  const Timeline t = twin_like_timeline();
  const Timeline back = read_chrome_trace_string(to_chrome_trace_json(t));
  CHECK(back.source == t.source);
  CHECK(back.metadata == t.metadata);
  CHECK(back.streams == t.streams);
  REQUIRE(back.spans.size() == t.spans.size());
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    CHECK(back.spans[i].name == t.spans[i].name);
    CHECK(back.spans[i].start_s == t.spans[i].start_s);
    CHECK(back.spans[i].duration_s == t.spans[i].duration_s);
    CHECK(back.spans[i].args == t.spans[i].args);
  }
  CHECK(back == t);
}

TEST_CASE("our file is a Chrome trace with microsecond times, pid = device, tid = stream",
          "[chrome]") {
  const Timeline t = twin_like_timeline();
  const auto doc = nlohmann::json::parse(to_chrome_trace_json(t));
  REQUIRE(doc["traceEvents"].is_array());
  int complete = 0, thread_names = 0, process_names = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") {
      if (e["name"] == "dispatch L1 mb0 F") {
        CHECK(e["pid"] == 0);
        CHECK(e["tid"] == 1);
        CHECK(e["cat"] == "dispatch");
        CHECK(e["ts"].get<double>() == Approx(125.0).margin(1e-9));
        CHECK(e["dur"].get<double>() == Approx(33.0).margin(1e-9));
        CHECK(e["args"]["ht.role"] == "comm");
        CHECK(e["args"]["bytes"] == "4194304");
      }
      ++complete;
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") ++thread_names;
    if (e["ph"] == "M" && e["name"] == "process_name") ++process_names;
  }
  CHECK(complete == 4);
  CHECK(thread_names == 4);
  CHECK(process_names == 2);
  CHECK(doc["otherData"]["generator"] == "hybrid-twin");
}

TEST_CASE("write_chrome_trace writes atomically and read_chrome_trace reads it back",
          "[chrome]") {
  const fs::path dir = fs::temp_directory_path() / ("ht_traces_rt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "twin.json").string();
  const Timeline t = twin_like_timeline();
  write_chrome_trace(t, path);
  ReadStats stats;
  CHECK(read_chrome_trace(path, {}, stats) == t);
  CHECK(stats.bytes == fs::file_size(path));
  CHECK(stats.spans == 4);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) (void)entry, ++files;
  CHECK(files == 1);  // no temporary left behind
  CHECK_THROWS_AS(write_chrome_trace(t, (dir / "missing" / "x.json").string()), TraceError);
  fs::remove_all(dir);
}

TEST_CASE("spans that cannot be written are refused with a TraceError", "[chrome]") {
  Timeline t;
  t.spans.push_back({"nan", "c", std::nan(""), 1, 0, 0, Role::Compute, {}});
  CHECK_THROWS_AS(to_chrome_trace_json(t), TraceError);
  t.spans[0] = {"neg", "c", 0, -1, 0, 0, Role::Compute, {}};
  CHECK_THROWS_AS(to_chrome_trace_json(t), TraceError);
  t.spans[0] = {"far", "c", 2e9, 1, 0, 0, Role::Compute, {}};
  CHECK_THROWS_AS(to_chrome_trace_json(t), TraceError);
  t.spans[0] = {"reserved", "c", 0, 1, 0, 0, Role::Compute, {{"ht.role", "comm"}}};
  CHECK_THROWS_AS(to_chrome_trace_json(t), TraceError);
}

namespace {
// Doubles of every shape: exact decimals, thirds, subnormals, huge, negative, sums with
// rounding error, and raw bit patterns.
rc::Gen<double> gen_time() {
  return rc::gen::oneOf(
      rc::gen::map(rc::gen::inRange<std::int64_t>(-1000000000, 1000000000),
                   [](std::int64_t n) { return double(n) * 1e-9; }),
      rc::gen::map(rc::gen::inRange(1, 1000000), [](int n) { return 1.0 / n; }),
      rc::gen::map(rc::gen::arbitrary<std::uint64_t>(),
                   [](std::uint64_t bits) {
                     double d;
                     std::memcpy(&d, &bits, sizeof d);
                     return std::isfinite(d) && std::fabs(d) <= kMaxTraceSeconds ? d : 0.5;
                   }),
      rc::gen::element(0.0, 5e-324, 2.2250738585072014e-308, 1e-7 + 2e-7, 1e9, -1e9, 123456.789));
}
}  // namespace

TEST_CASE("any finite start and duration round-trips exactly", "[chrome][property]") {
  rc::prop("read(write(t)) == t", [] {
    Timeline t;
    t.source = *rc::gen::arbitrary<std::string>();
    const int n = *rc::gen::inRange(0, 20);
    for (int i = 0; i < n; ++i) {
      Span s;
      s.name = *rc::gen::container<std::string>(rc::gen::inRange<char>(32, 126));
      s.category = *rc::gen::element<std::string>("mlp", "dispatch", "", "k");
      s.start_s = *gen_time();
      s.duration_s = std::fabs(*gen_time());
      s.device = *rc::gen::inRange(-3, 64);
      s.stream = *rc::gen::inRange(0, 8);
      s.role = *rc::gen::element(Role::Compute, Role::Comm, Role::Other);
      s.args["microbatch"] = std::to_string(*rc::gen::inRange(0, 9));
      t.spans.push_back(s);
    }
    const Timeline back = read_chrome_trace_string(to_chrome_trace_json(t));
    RC_ASSERT(back.spans.size() == t.spans.size());
    for (std::size_t i = 0; i < t.spans.size(); ++i) {
      RC_ASSERT(back.spans[i].start_s == t.spans[i].start_s);
      RC_ASSERT(back.spans[i].duration_s == t.spans[i].duration_s);
    }
    // Arbitrary (possibly invalid UTF-8) source strings are replaced, everything else exact.
    t.source = back.source;
    RC_ASSERT(back == t);
  });
}
