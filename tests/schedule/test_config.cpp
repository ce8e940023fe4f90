// Model dimension files and range checks: a saved file reads back equal, partial files keep the
// defaults, and unknown keys, wrong types and out-of-range values are rejected by name.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "ht/schedule/config.hpp"
#include "ht/schedule/error.hpp"

using namespace ht::schedule;

namespace {

std::string model_error(const std::string& text) {
  try {
    model_dims_from_json(text);
  } catch (const ScheduleError& e) {
    CHECK(e.code() == ErrorCode::BadModel);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model dims survive a JSON round trip", "[schedule][config]") {
  for (const ModelDims& d : {ModelDims{}, tiny_model()}) {
    const std::string text = model_dims_to_json(d);
    CHECK(model_dims_from_json(text) == d);
    CHECK(model_dims_to_json(model_dims_from_json(text)) == text);
  }
}

TEST_CASE("a partial model file keeps the defaults of the missing fields", "[schedule][config]") {
  const ModelDims d = model_dims_from_json(R"({"hidden": 512, "num_experts": 16})");
  ModelDims expected;
  expected.hidden = 512;
  expected.num_experts = 16;
  CHECK(d == expected);
}

TEST_CASE("model files with unknown keys, wrong types or bad values are rejected",
          "[schedule][config]") {
  CHECK_THAT(model_error(R"({"hiden": 512})"), Catch::Contains("unknown model field 'hiden'"));
  CHECK_THAT(model_error(R"({"hidden": 1.5})"), Catch::Contains("'hidden' must be an integer"));
  CHECK_THAT(model_error(R"({"hidden": "64"})"), Catch::Contains("'hidden' must be an integer"));
  CHECK_THAT(model_error(R"({"hidden": 0})"), Catch::Contains("'hidden' = 0 must be >= 1"));
  // Above the cap, the cap is named (not the lower bound the value passes).
  CHECK_THAT(model_error(R"({"hidden": 2147483647})"),
             Catch::Contains("'hidden' = 2147483647 must be in [1, 1073741824]"));
  CHECK_THAT(model_error(R"({"hidden": 99999999999})"), Catch::Contains("out of range"));
  CHECK_THAT(model_error(R"({"num_heads": 6, "num_kv_heads": 4})"),
             Catch::Contains("num_heads = 6 must be a multiple of num_kv_heads = 4"));
  CHECK_THAT(model_error(R"([1, 2])"), Catch::Contains("one JSON object"));
  CHECK_THAT(model_error(R"({"hidden": )"), Catch::Contains("not valid JSON"));
  CHECK(model_error(R"({"shared_expert_ffn": 0})").empty());
}

TEST_CASE("model files save atomically and load back", "[schedule][config]") {
  const auto dir = std::filesystem::temp_directory_path() / ("ht_schedule_test_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "model.json";
  save_model_dims(path, tiny_model());
  CHECK(load_model_dims(path) == tiny_model());
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    CHECK(entry.path().filename() == "model.json");  // no temp file left behind
  {
    std::ofstream(path) << R"({"vocab": -1})";
  }
  try {
    load_model_dims(path);
    FAIL("a negative vocab loaded");
  } catch (const ScheduleError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("'vocab' = -1") && Catch::Contains("model.json"));
  }
  CHECK_THROWS_AS(load_model_dims(dir / "missing.json"), ScheduleError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("every model field has a JSON name and a lower bound", "[schedule][config]") {
  CHECK(model_fields().size() == 38);
  ModelDims d = tiny_model();
  for (const ModelField& f : model_fields()) {
    ModelDims bad = d;
    bad.*f.member = f.min - 1;
    CHECK_THROWS_AS(validate(bad), ScheduleError);
    if (f.max < ModelField{}.max) {
      bad.*f.member = f.max + 1;
      CHECK_THROWS_AS(validate(bad), ScheduleError);
      bad.*f.member = f.max;
      CHECK_NOTHROW(validate(bad));
    }
  }
}
