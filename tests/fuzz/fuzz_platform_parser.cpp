// libFuzzer target for the platform inputs of `simulate --platform`: the text form
// ("PRESET:key=value,..." / "FILE.xml:...", sim::parse_platform, then sized_for and describe) and
// the host-count scan of XML platform files (sim::check_platform_xml) that runs before SimGrid
// reads one. The first byte picks which; the contract: success or SimError. An accepted spec
// describes at most kMaxPlatformGpus GPUs.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_contract.hpp"
#include "ht/sim/error.hpp"
#include "ht/sim/platform.hpp"
#include "ht/sim/platform_xml.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using ht::sim::SimError;
  if (data[0] & 1) {
    ht::fuzz::expect_only<SimError>("check_platform_xml", [&] {
      ht::fuzz::require(ht::sim::check_platform_xml(text, "fuzz input") <= ht::sim::kMaxXmlHosts,
                        "an accepted XML platform has at most kMaxXmlHosts hosts");
    });
    return 0;
  }
  ht::fuzz::expect_only<SimError>("parse_platform", [&] {
    const auto spec = ht::sim::parse_platform(text);
    ht::fuzz::require(spec.gpus() <= ht::sim::kMaxPlatformGpus, "an accepted platform has at most 2^20 GPUs");
    const int world = 1 + data[0] / 2;  // a plan of 1..128 ranks
    ht::fuzz::expect_only<SimError>("sized_for", [&] { (void)ht::sim::describe(ht::sim::sized_for(spec, world)); });
  });
  return 0;
}
