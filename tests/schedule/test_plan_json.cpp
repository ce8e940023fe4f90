// Plan JSON: write -> read gives an equal plan and the same bytes; the reader rejects other
// formats and versions, dangling ids, unknown enums and keys, each with a message that says where.
#include <catch2/catch.hpp>

#include <filesystem>

#include <unistd.h>

#include "helpers.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/plan_json.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

std::string plan_error(const std::string& text) {
  try {
    plan_from_json(text);
  } catch (const ScheduleError& e) {
    CHECK(e.code() == ErrorCode::BadPlan);
    return e.what();
  }
  return "";
}

std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("a plan survives write -> read with equal value and identical bytes", "[schedule][json]") {
  const Plan plan = make_plan("[M*E]|[*E]|[*-]|[*E]", parallel(2, 4, 4, 2, 2), options(true, true));
  const std::string text = plan_to_json(plan);
  const Plan back = plan_from_json(text);
  CHECK(back == plan);
  CHECK(plan_to_json(back) == text);
  CHECK_THAT(text, Catch::StartsWith(R"({"format":"hybrid-twin-plan","version":2,)"));
}

TEST_CASE("version 1 plans (no TP/CP, parts, groups or kernels) still load", "[schedule][json]") {
  const Plan old = load_plan(std::string(HT_GOLDEN_DIR) + "/combined.json");
  CHECK(old.version == kPlanFormatVersion);
  CHECK(old.tp == 1);
  CHECK(old.works.empty());
  int a2a = 0;
  for (const Collective& c : old.collectives) {
    CHECK(c.group == (c.kind == CollectiveKind::AllToAll ? Group::Ep : Group::Dp));
    a2a += c.kind == CollectiveKind::AllToAll;
  }
  CHECK(a2a > 0);
}

TEST_CASE("plan files are written atomically and read back", "[schedule][json]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ht_schedule_test_json_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const Plan plan = make_plan("M[*E]", parallel(2, 2, 3), options(true, true));
  save_plan(dir / "plan.json", plan);
  CHECK(load_plan(dir / "plan.json") == plan);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files += entry.is_regular_file();
  CHECK(files == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("the plan reader rejects malformed files with a clear message", "[schedule][json]") {
  const std::string good = plan_to_json(make_plan("[*E]", parallel(2, 2, 2), options(true, true)));
  REQUIRE(plan_error(good).empty());
  CHECK_THAT(plan_error(replace_once(good, "\"version\":2", "\"version\":3")),
             Catch::Contains("unsupported plan version 3"));
  CHECK_THAT(plan_error(replace_once(good, "\"work\":0", "\"work\":77")), Catch::Contains("unknown work 77"));
  CHECK_THAT(plan_error(replace_once(good, "\"group\":\"ep\"", "\"group\":\"xp\"")),
             Catch::Contains("group has the unknown value \"xp\""));
  CHECK_THAT(plan_error(replace_once(good, "hybrid-twin-plan", "chrome-trace")),
             Catch::Contains("not a plan file"));
  CHECK_THAT(plan_error(replace_once(good, "\"deps\":[0]", "\"deps\":[99999]")),
             Catch::Contains("dangling node id 99999"));
  CHECK_THAT(plan_error(replace_once(good, "\"slot\":\"mlp\"", "\"slot\":\"mlq\"")),
             Catch::Contains("unknown value \"mlq\""));
  CHECK_THAT(plan_error(replace_once(good, "\"phase\":\"forward\"", "\"phase\":\"sideways\"")),
             Catch::Contains("phase has the unknown value"));
  CHECK_THAT(plan_error(replace_once(good, "\"kind\":\"all_to_all\"", "\"kind\":\"gossip\"")),
             Catch::Contains("kind has the unknown value"));
  CHECK_THAT(plan_error(replace_once(good, "\"mtp\":false", "\"mtp\":false,\"colour\":1")),
             Catch::Contains("unknown key \"colour\""));
  CHECK_THAT(plan_error(replace_once(good, "\"microbatch\":0", "\"microbatch\":\"0\"")),
             Catch::Contains("must be an integer"));
  CHECK_THAT(plan_error(replace_once(good, "\"collective\":0", "\"collective\":12345")),
             Catch::Contains("dangling collective 12345"));
  CHECK_THAT(plan_error(replace_once(good, "\"issue\":[0,", "\"issue\":[")),
             Catch::Contains("never issued"));
  CHECK_THAT(plan_error(replace_once(good, "\"stream\":\"comm\"", "\"stream\":\"compute\"")),
             Catch::Contains("on the compute stream"));
  CHECK_THAT(plan_error("{"), Catch::Contains("not valid JSON"));
  CHECK_THAT(plan_error("[]"), Catch::Contains("must be a JSON object"));
}

TEST_CASE("node labels and enum names are stable", "[schedule][json]") {
  Node n;
  n.phase = Phase::Weight;
  n.microbatch = 3;
  n.layer = 5;
  n.slot = Slot::Mlp;
  CHECK(n.label() == "W mb3 L5 mlp");
  n.vp_stage = 1;
  n.mtp = true;
  n.layer = 0;
  n.phase = Phase::Backward;
  n.slot = Slot::PreDispatch;
  CHECK(n.label() == "B mb3 v1 MTP0 pre_dispatch");
  for (Slot s : {Slot::PreProcess, Slot::PreDispatch, Slot::Dispatch, Slot::Mlp, Slot::Combine,
                 Slot::MtpPost, Slot::PostProcess, Slot::PipeSend, Slot::PipeRecv,
                 Slot::GradAllReduce})
    CHECK(slot_from_string(to_string(s)) == s);
  CHECK(to_string(Slot::GradAllReduce) == "grad_all_reduce");
  CHECK(to_string(CollectiveKind::PointToPoint) == "point_to_point");
  CHECK(to_string(Stream::Comm) == "comm");
  CHECK_FALSE(stream_from_string("Compute").has_value());
}
