// libFuzzer target for the counterexample reader behind `fuzz --replay FILE`
// (verify::parse_counterexample: depth-limited JSON, the file's fields, then the case schema of
// case_schema.hpp, the guard every replayed check relies on). The contract: a Counterexample or a
// std::runtime_error (ht::io::IoError is one; a bad case is wrapped as one with its source). An
// accepted case passes the schema again after a round trip through its own JSON.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "fuzz_contract.hpp"
#include "ht/verify/case_schema.hpp"
#include "ht/verify/runner.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<ht::verify::Counterexample> ce;
  ht::fuzz::expect_only<std::runtime_error>("parse_counterexample",
                                            [&] { ce = ht::verify::parse_counterexample(text, "fuzz input"); });
  if (!ce) return 0;
  const std::string again = ht::verify::to_json(*ce).dump();
  ht::fuzz::expect_only<std::runtime_error>("parse_counterexample (round trip)", [&] {
    ht::fuzz::require(ht::verify::parse_counterexample(again, "round trip").input == ce->input,
                      "an accepted counterexample reads back to the same case");
  });
  return 0;
}
