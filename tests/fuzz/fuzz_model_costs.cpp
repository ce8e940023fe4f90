// libFuzzer target for the small JSON readers of the what-if flow: model dimensions (`--model`,
// schedule::model_dims_from_json), cost models (`--costs`, sim::parse_costs_json) and plan files
// (schedule::plan_from_json). The first byte picks the reader; the rest is the document. The
// contract: success or the module's typed error. Accepted model dimensions pass validate() and
// print back to the same dimensions; accepted plans print back to the same plan.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_contract.hpp"
#include "ht/schedule/config.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/plan_json.hpp"
#include "ht/sim/cost_model.hpp"
#include "ht/sim/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using ht::schedule::ScheduleError;
  switch (data[0] % 3) {
    case 0:
      ht::fuzz::expect_only<ScheduleError>("model_dims_from_json", [&] {
        const auto dims = ht::schedule::model_dims_from_json(text);
        ht::schedule::validate(dims);
        ht::fuzz::require(ht::schedule::model_dims_from_json(ht::schedule::model_dims_to_json(dims)) == dims,
                          "model dimensions print back to themselves");
      });
      break;
    case 1:
      ht::fuzz::expect_only<ht::sim::SimError>("parse_costs_json", [&] { (void)ht::sim::parse_costs_json(text); });
      break;
    default:
      ht::fuzz::expect_only<ScheduleError>("plan_from_json", [&] {
        const auto plan = ht::schedule::plan_from_json(text);
        ht::fuzz::require(ht::schedule::plan_from_json(ht::schedule::plan_to_json(plan)) == plan,
                          "plans print back to themselves");
      });
      break;
  }
  return 0;
}
