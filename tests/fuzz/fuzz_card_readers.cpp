// libFuzzer target for the readers that turn a model description into a card (issue 29 item 4):
// model cards (`--model FILE.json`, schedule::parse_model_card), Hugging Face configs
// (`--model config.json`, `models import`, schedule::import_hf_config) and Megatron-LM argument
// files (`--megatron-args`, cli::translate_megatron_args). The first byte picks the reader; the
// rest is the document. The contract: success or the reader's typed error (ScheduleError, the
// CLI's UsageError). An accepted card or import prints back, through the card format, to the
// same pattern and dimensions; an import reports every field of the config, used or not.
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
  switch (data[0] % 3) {
    case 0:
      ht::fuzz::expect_only<ScheduleError>("parse_model_card", [&] {
        round_trip(ht::schedule::parse_model_card(text, "fuzz"), "model cards print back to themselves");
      });
      break;
    case 1:
      ht::fuzz::expect_only<ScheduleError>("import_hf_config", [&] {
        const ht::schedule::HfImport in = ht::schedule::import_hf_config(text, "fuzz");
        round_trip(in.card, "imported cards print back to themselves");
        const auto j = nlohmann::json::parse(text);
        ht::fuzz::require(in.used.size() + in.not_used.size() == j.size(), "an import reports every field, used or not");
      });
      break;
    default:
      ht::fuzz::expect_only<ScheduleError, ht::cli::UsageError>(
          "translate_megatron_args", [&] { (void)ht::cli::translate_megatron_args(std::string(text), nullptr); });
      break;
  }
  return 0;
}
