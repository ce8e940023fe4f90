// merge's schema and identity (see merge_schema.hpp).
#include "merge_schema.hpp"

#include <cmath>
#include <sstream>

#include "command.hpp"

namespace ht::cli {

// The schema merge reads (what simulate --json writes): a refusal names the file and the key.
void check_result(const std::string& f, const nlohmann::json& r, bool needs_rate) {
  auto bad = [&](const std::string& what) { throw UsageError("'" + f + "': " + what); };
  if (!r.is_object() || !r.contains("step_time_s") || !r.contains("layout"))
    bad("not the JSON of `simulate --json` or `search --json` (no step_time_s/layout)");
  auto positive = [&](const char* k) {
    if (!r.contains(k) || !r[k].is_number() || !std::isfinite(r[k].get<double>()) || !(r[k].get<double>() > 0))
      bad(std::string(k) + " is missing or not a positive number");
  };
  auto number = [&](const char* k) {
    if (!r.contains(k) || !r[k].is_number() || !std::isfinite(r[k].get<double>()) || r[k].get<double>() < 0)
      bad(std::string(k) + " is missing or not a number >= 0");
  };
  positive("step_time_s");
  positive("tokens_per_s");
  for (const char* k : {"mfu", "memory_gib", "a2a_hidden_fraction"}) number(k);
  if (!r.contains("schedule") || !r["schedule"].is_string()) bad("schedule is missing or not a string");
  const nlohmann::json& l = r["layout"];
  if (!l.is_object()) bad("layout is not an object");
  for (const char* k : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches"}) {
    if (!l.contains(k) || !l[k].is_number()) bad(std::string("layout.") + k + " is missing or not a number");
    const double v = l[k].get<double>();
    if (!(v >= 0 && v < 2147483648.0) || v != std::floor(v))
      bad(std::string("layout.") + k + " = " + l[k].dump().substr(0, 40) + " is not a whole number of ranks");
  }
  if (!l.contains("recompute") || !l["recompute"].is_string()) bad("layout.recompute is missing or not a string");
  if (needs_rate) positive("gpus");
}

// What makes results comparable: one model (card and pattern), one cluster, one batch.
std::string run_identity(const nlohmann::json& r) {
  auto text = [&](const char* k) { return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : ""; };
  const nlohmann::json& l = r["layout"];
  auto field = [&](const char* k) { return l.contains(k) ? l[k].dump() : "?"; };
  return text("model") + "|" + text("pattern") + "|" + text("platform") + "|" + field("seq_len") + "|" + field("gbs");
}
std::string describe_identity(const nlohmann::json& r) {
  auto text = [&](const char* k) { return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : ""; };
  const std::string model = !text("model").empty() ? text("model") : "pattern '" + text("pattern").substr(0, 30) + "'";
  std::istringstream words(text("platform"));
  std::string platform;
  words >> platform >> platform;  // "platform NAME  nodes ..."
  const nlohmann::json& l = r["layout"];
  auto number = [&](const char* k) {
    if (!l.contains(k) || !l[k].is_number()) return std::string("?");
    std::ostringstream o;
    o << l[k].get<double>();
    return o.str();
  };
  return model + " on " + (platform.empty() ? "?" : platform) + ", GBS " + number("gbs") + ", seq " + number("seq_len");
}

}  // namespace ht::cli
