// Exact seconds <-> microsecond text for Chrome-trace ts/dur (internal to ht::traces).
//
// Why decimal text and not x * 1e6: multiplying and dividing by 1e6 in binary does not give the
// same double back for every x, but shifting the decimal point does. The writer prints the
// shortest round-trip decimal of the seconds value with the point moved six places; the reader
// moves it back and converts once, which lands on the very same double.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ht::traces::detail {

// Seconds -> microseconds as a JSON number text ("12.5", "0.001", "1.5e+21"). x must be finite.
std::string seconds_to_us_text(double seconds);

// JSON number text in microseconds -> seconds, rounded once. The text must be a valid JSON number.
double us_text_to_seconds(std::string_view text);

// Microseconds split for rebasing large absolute timestamps (Kineto uses epoch microseconds, where
// a double in seconds would lose the sub-microsecond part): value = whole + fraction.
struct SplitMicros {
  std::int64_t whole = 0;
  double fraction = 0;
};
// Returns false when |value| >= 1e17 us (beyond what the split can hold exactly enough).
bool split_us_text(std::string_view text, SplitMicros& out);

}  // namespace ht::traces::detail
