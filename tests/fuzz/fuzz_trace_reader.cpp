// libFuzzer target for the Chrome-trace reader (traces/src/chrome_read.cpp), the input of
// `trace summary|compare|svg` and `calibrate`: arbitrary bytes are read as a trace, with the first
// byte choosing --cpu-ops and whether the next bytes are a --comm-regex (compiled by RE2, which
// must reject what it cannot run in linear time). The contract: success or TraceError, nothing
// else; a timeline that was read keeps finite, bounded times.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_contract.hpp"
#include "ht/traces/chrome.hpp"
#include "ht/traces/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  ht::traces::ReadOptions options;
  options.include_cpu_ops = data[0] & 1;
  if (data[0] & 2) {  // a regex of up to 31 bytes from the front of the rest
    const std::size_t n = std::min<std::size_t>(text.size(), (data[0] >> 3) & 31);
    options.comm_regex = std::string(text.substr(0, n));
    text.remove_prefix(n);
  }
  ht::fuzz::expect_only<ht::traces::TraceError>("read_chrome_trace_string", [&] {
    const auto t = ht::traces::read_chrome_trace_string(text, options);
    for (const auto& s : t.spans)
      ht::fuzz::require(std::isfinite(s.start_s) && s.duration_s >= 0 &&
                            s.duration_s <= ht::traces::kMaxTraceSeconds,
                        "kept spans have finite start and a duration in [0, 1e9 s]");
  });
  return 0;
}
