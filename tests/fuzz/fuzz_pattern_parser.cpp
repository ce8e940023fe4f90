// libFuzzer target for the pattern language: arbitrary bytes go through parse() and, when they
// parse, through pipeline allocation (pp, vpp and stage counts taken from the input), checkpoint
// naming and the GPT import map. The contract under test: bad input ends in success or a
// PatternError, nothing else. Any other exception aborts, which libFuzzer reports as a crash;
// ASan/UBSan catch memory and undefined-behaviour errors on the way. Accepted input must also keep
// the invariants the properties check: printing round-trips, flatten keeps the physical layers,
// and the stages of a successful allocation tile the model in order.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string_view>
#include <vector>

#include "ht/patterns/checkpoint.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/patterns/pipeline.hpp"

namespace {

using namespace ht::patterns;

// Runs `step`; a PatternError is an accepted outcome, every other exception is a bug.
template <class Step>
void expect_clean(const char* what, Step&& step) {
  try {
    step();
  } catch (const PatternError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw a non-PatternError exception: %s\n", what, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s threw a non-std exception\n", what);
    std::abort();
  }
}

void require(bool ok, const char* invariant) {
  if (ok) return;
  std::fprintf(stderr, "invariant broken: %s\n", invariant);
  std::abort();
}

// The first bytes choose a small pipeline; the rest is the pattern. Values are kept small (and
// sometimes out of range) so both the happy paths and the argument checks get exercised.
struct Knobs {
  PipelineConfig config;
  int pp_rank = 0;
  std::optional<int> vp_stage;
  int physical = 0;
};

Knobs knobs_from(const uint8_t* data, std::size_t size) {
  auto byte = [&](std::size_t i) -> int { return i < size ? data[i] : 0; };
  Knobs k;
  k.config.pp = byte(0) % 6;  // 0 is deliberately invalid
  if (byte(1) & 0x80) k.config.vpp = byte(1) % 5;
  if (byte(2) & 0x80) k.config.first_stage_layers = byte(2) % 9 - 1;
  if (byte(3) & 0x80) k.config.last_stage_layers = byte(3) % 9 - 1;
  k.pp_rank = byte(4) % 7 - 1;
  if (byte(5) & 0x80) k.vp_stage = byte(5) % 5 - 1;
  k.physical = byte(6) % 40 - 2;
  return k;
}

constexpr std::size_t kKnobBytes = 7;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const Knobs knobs = knobs_from(data, size);
  const std::size_t skip = size < kKnobBytes ? size : kKnobBytes;
  const std::string_view text(reinterpret_cast<const char*>(data) + skip, size - skip);

  expect_clean("parse_segment", [&] { (void)parse_segment(text); });

  std::optional<ParsedPattern> parsed;
  const bool lenient = knobs.physical & 1;
  expect_clean("parse", [&] { parsed = parse(text, ParseOptions{.check_namespaces = !lenient}); });
  if (!parsed) return 0;

  expect_clean("to_string/flatten", [&] {
    const ParsedPattern again = parse(to_string(*parsed), ParseOptions{.check_namespaces = !lenient});
    require(again == *parsed, "parse(to_string(p)) == p");
    require(flatten(*parsed).flattened_symbols() == parsed->flattened_symbols(), "flatten keeps the layers");
  });
  expect_clean("allocate_stages", [&] {
    const auto stages = allocate_stages(*parsed, knobs.config);
    int physical = 0, logical = 0;
    std::vector<Item> items;
    for (const auto& stage : stages) {
      require(stage.physical_offset == physical && stage.logical_offset == logical, "stage offsets add up");
      physical += stage.physical_count();
      logical += static_cast<int>(stage.items.size());
      items.insert(items.end(), stage.items.begin(), stage.items.end());
    }
    require(items == parsed->items(), "stages tile the model in order");
  });
  expect_clean("select_stage", [&] { (void)select_stage(*parsed, knobs.config, knobs.pp_rank, knobs.vp_stage); });
  expect_clean("logical_offset_of", [&] { (void)logical_offset_of(*parsed, knobs.physical); });
  expect_clean("counts", [&] {
    (void)layer_counts(*parsed);
    (void)layer_maps(*parsed);
  });
  expect_clean("keys", [&] {
    for (const auto& k : layer_keys(*parsed)) (void)k.namespace_prefixes();
    (void)final_norm_prefix(*parsed);
    (void)mtp_layer_prefixes(*parsed);
    (void)mtp_inner_prefixes(*parsed, knobs.pp_rank);
  });
  expect_clean("gpt_layer_map", [&] { (void)gpt_layer_map(*parsed); });
  return 0;
}
