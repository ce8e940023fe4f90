// merge's schema and identity (see merge_schema.hpp).
#include "merge_schema.hpp"

#include <cmath>
#include <sstream>
#include <string_view>

#include "command.hpp"

namespace ht::cli {

// The schema merge reads (what simulate --json writes): a refusal names the file and the key.
void check_result(const std::string& f, const nlohmann::json& r, bool needs_rate) {
  auto bad = [&](const std::string& what) { throw UsageError("'" + f + "': " + what); };
  if (!r.is_object() || !r.contains("step_time_s") || !r.contains("layout"))
    bad("not the JSON of `simulate --json` or `search --json` (no step_time_s/layout)");
  // Each figure within what a step can be (1e12 bounds every seconds, GiB and tokens/s figure far
  // beyond a real one, so that sums and products stay finite in the table).
  auto within = [&](const char* k, double low, bool strict, double high) {
    const bool ok = r.contains(k) && r[k].is_number() && (strict ? r[k].get<double>() > low : r[k].get<double>() >= low) &&
                    r[k].get<double>() <= high;
    if (!ok) {
      std::ostringstream range;
      range << (strict ? "(" : "[") << low << ", " << high << "]";
      bad(std::string(k) + (r.contains(k) ? " = " + r[k].dump().substr(0, 40) : std::string(" is missing")) +
          "; expected a number in " + range.str());
    }
  };
  auto positive = [&](const char* k) { within(k, 0, true, 1e12); };
  positive("step_time_s");
  positive("tokens_per_s");
  within("memory_gib", 0, false, 1e12);
  within("mfu", 0, false, 1);
  within("a2a_hidden_fraction", 0, false, 1);
  if (!r.contains("schedule") || !r["schedule"].is_string()) bad("schedule is missing or not a string");
  const nlohmann::json& l = r["layout"];
  if (!l.is_object()) bad("layout is not an object");
  for (const char* k : {"tp", "cp", "pp", "vpp", "ep", "etp", "dp", "mbs", "microbatches", "gbs", "seq_len"}) {
    if (!l.contains(k) || !l[k].is_number()) bad(std::string("layout.") + k + " is missing or not a number");
    const double v = l[k].get<double>();
    const double least = std::string_view(k) == "vpp" ? 0 : 1;  // vpp 0: no interleaving
    if (!(v >= least && v < 2147483648.0) || v != std::floor(v))
      bad(std::string("layout.") + k + " = " + l[k].dump().substr(0, 40) + " is not a whole number >= " +
          (least == 0 ? "0" : "1"));
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
