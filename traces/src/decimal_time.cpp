// Exact seconds <-> microsecond text; see decimal_time.hpp.
#include "decimal_time.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <system_error>

namespace ht::traces::detail {

namespace {

// A JSON number as sign, significant digits and a power of ten: value = digits * 10^exponent.
struct Decimal {
  bool negative = false;
  std::string digits;  // no leading zeros unless the value is zero ("0")
  long exponent = 0;
};

Decimal decompose(std::string_view text) {
  Decimal d;
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.negative = text[i++] == '-';
  long fraction_digits = 0;
  bool in_fraction = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      in_fraction = true;
    } else if (c >= '0' && c <= '9') {
      d.digits.push_back(c);
      if (in_fraction) ++fraction_digits;
    } else {
      break;
    }
  }
  long exp = 0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) neg = text[i++] == '-';
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (exp < 100000) exp = exp * 10 + (text[i] - '0');  // saturate: the value is 0 or inf anyway
    }
    if (neg) exp = -exp;
  }
  d.exponent = exp - fraction_digits;
  std::size_t first = d.digits.find_first_not_of('0');
  if (first == std::string::npos) {
    d.digits = "0";
    d.exponent = 0;
  } else {
    d.digits.erase(0, first);
  }
  return d;
}

double to_double(const Decimal& d) {
  std::string text;
  if (d.negative) text.push_back('-');
  text += d.digits;
  text += 'e';
  text += std::to_string(d.exponent);
  double value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // from_chars reports underflow and overflow alike; tell them apart by the exponent.
    const long magnitude = d.exponent + static_cast<long>(d.digits.size());
    value = magnitude < 0 ? 0.0 : HUGE_VAL;
    if (d.negative) value = -value;
  }
  return value;
}

}  // namespace

std::string seconds_to_us_text(double seconds) {
  if (seconds == 0) return "0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds, std::chars_format::scientific);
  (void)ec;
  Decimal d = decompose(std::string_view(buf, static_cast<std::size_t>(end - buf)));
  // value = digits * 10^exponent seconds = digits * 10^(exponent + 6) microseconds
  const long e = d.exponent + 6;
  const long n = static_cast<long>(d.digits.size());
  const long point = n + e;  // digits before the decimal point
  std::string out;
  if (d.negative) out.push_back('-');
  if (point > 21 || point < -6) {
    out += d.digits.substr(0, 1);
    if (n > 1) out += "." + d.digits.substr(1);
    out += "e" + std::to_string(point - 1);
  } else if (point <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-point), '0') + d.digits;
  } else if (point >= n) {
    out += d.digits + std::string(static_cast<std::size_t>(point - n), '0');
  } else {
    out += d.digits.substr(0, static_cast<std::size_t>(point)) + "." +
           d.digits.substr(static_cast<std::size_t>(point));
  }
  return out;
}

double us_text_to_seconds(std::string_view text) {
  Decimal d = decompose(text);
  d.exponent -= 6;
  return to_double(d);
}

bool split_us_text(std::string_view text, SplitMicros& out) {
  const Decimal d = decompose(text);
  const long magnitude = static_cast<long>(d.digits.size()) + d.exponent;  // integer digits
  if (d.digits != "0" && magnitude > 17) return false;
  std::int64_t whole = 0;
  Decimal fraction;
  fraction.negative = d.negative;
  if (magnitude <= 0) {
    fraction.digits = d.digits;
    fraction.exponent = d.exponent;
  } else {
    const long n = static_cast<long>(d.digits.size());
    const long int_digits = std::min(magnitude, n);
    for (long k = 0; k < int_digits; ++k) whole = whole * 10 + (d.digits[k] - '0');
    for (long k = n; k < magnitude; ++k) whole *= 10;
    fraction.digits = int_digits < n ? d.digits.substr(static_cast<std::size_t>(int_digits)) : "0";
    fraction.exponent = int_digits < n ? d.exponent : 0;
    if (d.negative) whole = -whole;
  }
  out.whole = whole;
  out.fraction = to_double(fraction);
  return true;
}

}  // namespace ht::traces::detail
