// libFuzzer target for the what-if readers (issue 29 item 4): model cards (`--model FILE.json`,
// schedule::parse_model_card), Hugging Face configs (`--model config.json`, `models import`,
// schedule::import_hf_config), Megatron-LM argument files (`--megatron-args`,
// cli::translate_megatron_args), the results `merge` reads (cli::check_result and the identity
// that says which compare) and `--sweep` axes (cli::parse_axis). The first byte picks the reader;
// the rest is the document. The contract: success or the reader's typed error (ScheduleError, the
// CLI's UsageError). An accepted card or import prints back, through the card format, to the
// same pattern and dimensions; an import reports every field of the config, used or not; an
// accepted sweep axis joins back to its text.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "fuzz_contract.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/hf_config.hpp"
#include "ht/schedule/model_card.hpp"
#include "megatron_args.hpp"
#include "merge_schema.hpp"
#include "sweep_axis.hpp"

namespace {
// The card format's round trip: what model_card_to_json writes parses back to the same card.
void round_trip(const ht::schedule::ModelCard& card, const char* what) {
  const ht::schedule::ModelCard again = ht::schedule::parse_model_card(ht::schedule::model_card_to_json(card), "fuzz");
  ht::fuzz::require(again.pattern == card.pattern && again.dims == card.dims, what);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using ht::schedule::ScheduleError;
  switch (data[0] % 5) {
    case 0:
      ht::fuzz::expect_only<ScheduleError>("parse_model_card", [&] {
        round_trip(ht::schedule::parse_model_card(text, "fuzz"), "model cards print back to themselves");
      });
      break;
    case 1:
      ht::fuzz::expect_only<ScheduleError>("import_hf_config", [&] {
        const ht::schedule::HfImport in = ht::schedule::import_hf_config(text, "fuzz");
        round_trip(in.card, "imported cards print back to themselves");
        const auto j = nlohmann::json::parse(ht::schedule::python_constants_as_strings(text));
        ht::fuzz::require(in.used.size() + in.not_used.size() == j.size(), "an import reports every field, used or not");
      });
      break;
    case 2:
      ht::fuzz::expect_only<ScheduleError, ht::cli::UsageError>(
          "translate_megatron_args", [&] { (void)ht::cli::translate_megatron_args(std::string(text), nullptr); });
      break;
    case 3: {
      // merge parses with nlohmann (duplicate keys: the last wins), then checks the schema.
      const auto r = nlohmann::json::parse(text, nullptr, false);
      if (r.is_discarded()) break;
      ht::fuzz::expect_only<ht::cli::UsageError>("check_result", [&] {
        ht::cli::check_result("fuzz.json", r, true);
        (void)ht::cli::run_identity(r);
        (void)ht::cli::identity_difference(r, r);
      });
      break;
    }
    default:
      ht::fuzz::expect_only<ht::cli::UsageError>("parse_axis", [&] {
        const std::string given(text);
        const ht::cli::Axis a = ht::cli::parse_axis(given);
        std::string joined = a.key + "=";
        for (std::size_t i = 0; i < a.values.size(); ++i) {
          ht::fuzz::require(!a.values[i].empty(), "sweep values are never empty");
          joined += (i ? "," : "") + a.values[i];
        }
        ht::fuzz::require(joined == given, "a sweep axis joins back to its text");
      });
      break;
  }
  return 0;
}
