// SVG rendering (well-formed, one lane per stream, exposed comm drawn exactly where the overlap
// analytics put it, window honoured), the CLI's JSON / table renderings, and human durations.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "ht/traces/chrome.hpp"
#include "ht/traces/error.hpp"
#include "ht/traces/overlap.hpp"
#include "ht/traces/report.hpp"
#include "ht/traces/svg.hpp"
#include "ht/traces/units.hpp"
#include "trace_test_support.hpp"

using namespace ht::traces;
using ht::traces::test::fixture;

namespace {
// A small XML well-formedness check: tags balance, attributes are quoted, entities are known.
bool well_formed(const std::string& xml, std::string& why) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < xml.size()) {
    if (xml[i] == '&') {
      static const std::regex entity("^&(amp|lt|gt|quot|apos);");
      if (!std::regex_search(xml.substr(i, 8), entity)) return why = "bad entity at " + std::to_string(i), false;
      ++i;
      continue;
    }
    if (xml[i] != '<') {
      ++i;
      continue;
    }
    const std::size_t end = xml.find('>', i);
    if (end == std::string::npos) return why = "unclosed tag", false;
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.front() == '?') continue;
    if (tag.find('<') != std::string::npos) return why = "'<' inside tag " + tag, false;
    if (std::count(tag.begin(), tag.end(), '"') % 2) return why = "unbalanced quotes in " + tag, false;
    if (tag.front() == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return why = "mismatched </" + tag.substr(1) + ">", false;
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find_first_of(" \n")));
    }
  }
  if (!open.empty()) return why = "unclosed <" + open.back() + ">", false;
  return true;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("the SVG of a profile is well-formed with one lane per stream and every exposed "
          "interval in red", "[svg]") {
  const Timeline t = read_chrome_trace(fixture("kineto_gpu_two_devices.json"));
  const std::string svg = render_svg(t);
  std::string why;
  if (!well_formed(svg, why)) FAIL(why);
  for (const StreamInfo& s : t.streams) CHECK(svg.find("dev " + std::to_string(s.device) + " / " + s.name) != std::string::npos);
  CHECK(count(svg, "exposed comm") >= 2);  // one strip label per device + legend
  // 7 exposed intervals in the hand computation of test_kineto_fixture.cpp, plus the legend box.
  CHECK(count(svg, "fill=\"#d62728\"><title>exposed comm") == 7);
  CHECK(svg.find("&lt;4, at::native::CUDAFunctor_add") != std::string::npos);  // names escaped
  CHECK(svg.find("nccl") != std::string::npos);                                // legend
}

TEST_CASE("an SVG window keeps only the spans inside it", "[svg]") {
  Timeline t;
  t.spans = {{"early", "mlp", 0, 1e-3, 0, 0, Role::Compute, {}},
             {"late", "mlp", 5e-3, 1e-3, 0, 0, Role::Compute, {}}};
  SvgOptions window;
  window.from_s = 4e-3;
  window.to_s = 7e-3;
  const std::string svg = render_svg(t, window);
  CHECK(svg.find("<title>late") != std::string::npos);
  CHECK(svg.find("<title>early") == std::string::npos);
  CHECK(svg.find("4.000 ms") != std::string::npos);  // axis labels in the window
  window.to_s = 3e-3;
  CHECK_THROWS_AS(render_svg(t, window), TraceError);
  std::string why;
  CHECK(well_formed(render_svg(Timeline{}), why));
}

TEST_CASE("summary JSON carries the fields the CLI promises", "[report]") {
  const OverlapSummary s = summarize(read_chrome_trace(fixture("kineto_gpu_two_devices.json")));
  const auto j = nlohmann::json::parse(summary_to_json(s));
  for (const char* key : {"devices", "compute_busy_s", "comm_busy_s", "comm_exposed_s",
                          "hidden_fraction", "span_s", "longest_exposed", "kernels", "categories"})
    CHECK(j.contains(key));
  CHECK(j["devices"].size() == 2);
  CHECK(j["comm_exposed_s"].get<double>() == s.comm_exposed_s);
  CHECK(j["devices"][1]["hidden_fraction"].get<double>() == s.devices[1].hidden_fraction);
  const std::string table = summary_table(s);
  CHECK(table.find("total") != std::string::npos);
  CHECK(table.find("110.000 us") != std::string::npos);  // total exposed comm
  const Comparison c = compare(Timeline{}, read_chrome_trace(fixture("kineto_gpu_two_devices.json")));
  const auto cj = nlohmann::json::parse(comparison_to_json(c));
  CHECK(cj["rows"][0]["metric"] == "step_time_s");
  CHECK(cj["rows"][0]["relative_error"] == -1.0);
  CHECK(comparison_table(c).find("step_time_s") != std::string::npos);
}

TEST_CASE("durations parse with units and print in the largest fitting unit", "[units]") {
  CHECK(parse_seconds("1.5ms") == 1.5e-3);
  CHECK(parse_seconds("200us") == 200e-6);
  CHECK(parse_seconds("3 ns") == 3e-9);
  CHECK(parse_seconds("0.25") == 0.25);
  CHECK(parse_seconds("2s") == 2);
  CHECK_THROWS_AS(parse_seconds("fast"), TraceError);
  CHECK_THROWS_AS(parse_seconds("1.5 fortnights"), TraceError);
  CHECK_THROWS_AS(parse_seconds("inf"), TraceError);
  CHECK_THROWS_AS(parse_seconds(""), TraceError);
  CHECK(format_seconds(0.0125) == "12.500 ms");
  CHECK(format_seconds(2.5) == "2.500 s");
  CHECK(format_seconds(3.5e-7) == "350.000 ns");
  CHECK(format_seconds(0) == "0");
}
