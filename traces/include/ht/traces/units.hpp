// Reading and printing durations for people: "--from 1.5ms", table cells such as "12.345 ms",
// SVG axis labels.
#pragma once

#include <string>
#include <string_view>

namespace ht::traces {

// "1.5ms", "200us", "200µs", "3ns", "0.25s", "2 ms"; a bare number is seconds. TraceError
// (Argument) on anything else, including non-finite values.
double parse_seconds(std::string_view text);

// Fixed 3-decimal rendering in the largest unit (s, ms, us, ns) that keeps the value >= 1;
// zero is "0".
std::string format_seconds(double seconds);

}  // namespace ht::traces
