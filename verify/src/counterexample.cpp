// Counterexample files (see runner.hpp): JSON out, and in through ht::io (a bounded regular file,
// depth-checked JSON) with the fields and the case's schema validated. Kept apart from the runner
// so the reader builds without the properties (the libFuzzer target links only this file and
// case_schema.cpp).
#include <stdexcept>

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"
#include "ht/io/output_file.hpp"
#include "ht/verify/case_schema.hpp"
#include "ht/verify/runner.hpp"

namespace ht::verify {
namespace {
constexpr std::string_view kFormat = "hybrid-twin-counterexample/1";
}  // namespace

nlohmann::json to_json(const Counterexample& ce) {
  return nlohmann::json{{"format", kFormat}, {"property", ce.property}, {"seed", ce.seed},
                        {"input", ce.input}, {"message", ce.message}};
}

Counterexample counterexample_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("a counterexample must be a JSON object");
  if (!j.contains("format") || j["format"] != kFormat)
    throw std::invalid_argument("not a counterexample file (format is not '" + std::string(kFormat) + "')");
  if (!j.contains("property") || !j["property"].is_string())
    throw std::invalid_argument("counterexample: 'property' must be a string");
  if (!j.contains("seed") || !j["seed"].is_number_unsigned())
    throw std::invalid_argument("counterexample: 'seed' must be a non-negative integer");
  if (!j.contains("input") || !j["input"].is_object())
    throw std::invalid_argument("counterexample: 'input' must be an object");
  Counterexample ce;
  ce.property = j["property"].get<std::string>();
  ce.seed = j["seed"].get<std::uint64_t>();
  ce.input = j["input"];
  if (j.contains("message") && j["message"].is_string()) ce.message = j["message"].get<std::string>();
  return ce;
}

void write_counterexample(const std::filesystem::path& path, const Counterexample& ce) {
  io::write_output_file(path, "counterexample", to_json(ce).dump(2) + "\n");
}

Counterexample parse_counterexample(std::string_view text, const std::string& source) {
  const nlohmann::json j = io::parse_json(text, source);
  try {
    Counterexample ce = counterexample_from_json(j);
    validate_case(ce.input);
    return ce;
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(source + ": " + e.what());
  }
}

Counterexample read_counterexample(const std::filesystem::path& path) {
  const std::string source = "counterexample " + io::quote_path(path.string());
  return parse_counterexample(io::read_input_file(path, io::kJsonFileLimit, "counterexample"), source);
}

}  // namespace ht::verify
