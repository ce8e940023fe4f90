// Text checks of XML platforms (see platform_xml.hpp). No XML parser: the scan only looks for the
// element names and the one attribute that multiply hosts, which is all the bound needs, and it
// never allocates more than one number at a time.
#include "ht/sim/platform_xml.hpp"

#include <cctype>

#include "ht/sim/error.hpp"

namespace ht::sim {
namespace {

[[noreturn]] void fail(const std::string& message) { throw SimError(SimErrorCode::BadPlatform, message); }

bool starts_element(std::string_view text, std::size_t at, std::string_view name) {
  if (text.compare(at, name.size(), name) != 0) return false;
  const std::size_t after = at + name.size();
  return after < text.size() && (std::isspace(static_cast<unsigned char>(text[after])) || text[after] == '/' ||
                                 text[after] == '>');
}

// "0-99,120,200-201": the number of values, saturating at limit + 1.
std::uint64_t radical_count(std::string_view value, const std::string& source, std::uint64_t limit) {
  std::uint64_t total = 0;
  std::size_t i = 0;
  auto number = [&](std::uint64_t& out) {
    const std::size_t begin = i;
    out = 0;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) {
      if (out > limit) out = limit + 1;  // saturate: the digits only make it larger
      else out = out * 10 + static_cast<std::uint64_t>(value[i] - '0');
      ++i;
    }
    if (i == begin)
      fail(source + ": radical=\"" + std::string(value.substr(0, 60)) + "\" is not a list of N or N-M ranges");
  };
  while (i <= value.size()) {
    while (i < value.size() && value[i] == ' ') ++i;
    std::uint64_t a = 0, b = 0;
    number(a);
    b = a;
    if (i < value.size() && value[i] == '-') {
      ++i;
      number(b);
    }
    if (b < a) fail(source + ": radical range " + std::to_string(a) + "-" + std::to_string(b) + " runs backwards");
    total += b - a + 1;
    if (total > limit) return limit + 1;
    while (i < value.size() && value[i] == ' ') ++i;
    if (i == value.size()) break;
    if (value[i] != ',')
      fail(source + ": radical=\"" + std::string(value.substr(0, 60)) + "\" is not a list of N or N-M ranges");
    ++i;
  }
  return total;
}

}  // namespace

std::uint64_t check_platform_xml(std::string_view text, const std::string& source) {
  std::uint64_t hosts = 0;
  const std::string_view attr = "radical=";
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && starts_element(text, i + 1, "host")) {
      ++hosts;
    } else if (text.compare(i, attr.size(), attr) == 0 && i + attr.size() < text.size()) {
      const char quote = text[i + attr.size()];
      if (quote != '"' && quote != '\'') continue;
      const std::size_t begin = i + attr.size() + 1;
      const std::size_t end = text.find(quote, begin);
      if (end == std::string_view::npos) fail(source + ": unterminated radical attribute");
      hosts += radical_count(text.substr(begin, end - begin), source, kMaxXmlHosts);
      i = end;
    }
    if (hosts > kMaxXmlHosts)
      fail(source + " describes more than " + std::to_string(kMaxXmlHosts) +
           " hosts (counting <host> elements and radical ranges), the limit of one platform");
  }
  return hosts;
}

}  // namespace ht::sim
