// libFuzzer target for the counterexample reader behind `fuzz --replay FILE`
// (verify::parse_counterexample: depth-limited JSON, the file's fields, then the case schema of
// case_schema.hpp). A file that passes is replayed when its property is a pattern or plan one (the
// engine and twin groups are not in this build): the schema must be enough for every check to
// run without a crash, a hang or an exception outside replay's contract.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "fuzz_contract.hpp"
#include "ht/io/error.hpp"
#include "ht/verify/case_schema.hpp"
#include "ht/verify/runner.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<ht::verify::Counterexample> ce;
  // read errors are runtime_error (IoError is one); a bad case inside is wrapped the same way
  ht::fuzz::expect_only<std::runtime_error>("parse_counterexample",
                                            [&] { ce = ht::verify::parse_counterexample(text, "fuzz input"); });
  if (!ce) return 0;
  const ht::verify::Property* p = ht::verify::find_property(ce->property);
  if (p == nullptr || (p->group != "pattern" && p->group != "plan")) return 0;
  ht::fuzz::expect_only<ht::verify::BadCase>("replay", [&] { (void)ht::verify::replay(*ce); });
  return 0;
}
