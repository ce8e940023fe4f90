// Human durations; see units.hpp.
#include "ht/traces/units.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "ht/traces/error.hpp"

namespace ht::traces {

double parse_seconds(std::string_view text) {
  const std::string original(text);
  auto fail = [&]() -> double {
    throw TraceError(TraceErrorCode::Argument,
                     "invalid time '" + original + "' (expected e.g. 1.5ms, 200us, 3ns, 0.25s)");
  };
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !std::isfinite(value)) return fail();
  std::string_view unit(ptr, text.data() + text.size() - ptr);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  // Dividing by an exact power of ten rounds once: "1.5ms" is the double nearest 0.0015.
  double divisor = 0;
  if (unit.empty() || unit == "s")
    divisor = 1;
  else if (unit == "ms")
    divisor = 1e3;
  else if (unit == "us" || unit == "\xC2\xB5s")
    divisor = 1e6;
  else if (unit == "ns")
    divisor = 1e9;
  else
    return fail();
  return value / divisor;
}

std::string format_seconds(double seconds) {
  const double a = std::fabs(seconds);
  const char* unit = "s";
  double v = seconds;
  if (a == 0 || a >= 1) {
  } else if (a >= 1e-3) {
    v = seconds * 1e3, unit = "ms";
  } else if (a >= 1e-6) {
    v = seconds * 1e6, unit = "us";
  } else {
    v = seconds * 1e9, unit = "ns";
  }
  if (seconds == 0) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f %s", v, unit);
  return buf;
}

}  // namespace ht::traces
