// A real file from PyTorch's profiler (fixtures/torch_cpu_profile.json, written by
// make_kineto_fixture.py with Debian's python3-torch on CPU) against the figures the same script
// computed in Python from that file (torch_cpu_profile.expected.json): a second implementation
// of parsing, comm classification and interval arithmetic.
#include <catch2/catch.hpp>

#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "ht/traces/chrome.hpp"
#include "ht/traces/overlap.hpp"
#include "trace_test_support.hpp"

using namespace ht::traces;
using ht::traces::test::fixture;
using ht::traces::test::us;

namespace {
nlohmann::json expected() {
  std::ifstream in(fixture("torch_cpu_profile.expected.json"));
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("the PyTorch profiler's CPU trace is read op by op when CPU ops are asked for",
          "[real]") {
  const auto want = expected();
  ReadOptions options;
  options.include_cpu_ops = true;
  ReadStats stats;
  const Timeline t = read_chrome_trace(fixture("torch_cpu_profile.json"), options, stats);
  CHECK(t.source == "pytorch-legacy");
  CHECK(stats.events == want["events"].get<std::uint64_t>());
  CHECK(t.spans.size() == want["spans"].get<std::size_t>());
  std::set<std::string> names;
  std::size_t comm = 0;
  std::set<int> streams;
  for (const Span& s : t.spans) {
    names.insert(s.name);
    comm += s.role == Role::Comm;
    streams.insert(s.stream);
    CHECK(s.device == -1);  // pid "CPU functions" is one synthetic device
  }
  CHECK(comm == want["comm_spans"].get<std::size_t>());
  CHECK(names == want["names"].get<std::set<std::string>>());
  CHECK(streams == want["threads"].get<std::set<int>>());
  REQUIRE(t.streams.size() == streams.size());
  CHECK(t.streams[0].name == "CPU functions thread 1");
}

TEST_CASE("overlap figures of the PyTorch profile equal the Python oracle", "[real][overlap]") {
  const auto want = expected();
  ReadOptions options;
  options.include_cpu_ops = true;
  const OverlapSummary s = summarize(read_chrome_trace(fixture("torch_cpu_profile.json"), options));
  REQUIRE(s.devices.size() == 1);
  CHECK(s.span_s == us(want["span_us"].get<double>()));
  CHECK(s.compute_busy_s == us(want["compute_busy_us"].get<double>()));
  CHECK(s.comm_busy_s == us(want["comm_busy_us"].get<double>()));
  CHECK(s.comm_exposed_s == us(want["comm_exposed_us"].get<double>()));
  REQUIRE_FALSE(s.longest_exposed.empty());
  CHECK(s.longest_exposed[0].duration_s() == us(want["longest_exposed_us"].get<double>()));
}

TEST_CASE("without CPU ops a CPU-only profile has no spans but still reads", "[real]") {
  ReadStats stats;
  const Timeline t = read_chrome_trace(fixture("torch_cpu_profile.json"), {}, stats);
  CHECK(t.spans.empty());
  CHECK(stats.skipped == expected()["spans"].get<std::uint64_t>());
  const OverlapSummary s = summarize(t);
  CHECK(s.span_s == 0);
  CHECK(s.hidden_fraction == 1.0);
}
