// merge's schema and identity (see merge_schema.hpp).
#include "merge_schema.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string_view>
#include <vector>

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

namespace {

// The identity's parts, in run_identity's order.
struct IdentityPart {
  const char* name;
  std::string value;
};
std::vector<IdentityPart> identity_parts(const nlohmann::json& r) {
  auto text = [&](const char* k) { return r.contains(k) && r[k].is_string() ? r[k].get<std::string>() : ""; };
  const nlohmann::json& l = r["layout"];
  auto field = [&](const char* k) { return l.contains(k) ? l[k].dump() : "?"; };
  return {{"model", text("model")},
          {"pattern", text("pattern")},
          {"platform", text("platform")},
          {"sequence length", field("seq_len")},
          {"global batch", field("gbs")}};
}

// `v` for a message: control bytes as '?', and past 60 characters a window around `at` (the first
// character that differs from the other side).
std::string shown(const std::string& v, std::size_t at) {
  std::string out;
  const std::size_t from = v.size() <= 60 || at < 20 ? 0 : std::min(at - 20, v.size() - 40);
  const std::size_t to = std::min(v.size(), from + (v.size() <= 60 ? 60 : 40));
  if (from > 0) out += "...";
  for (std::size_t i = from; i < to; ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    out += c < 0x20 || c == 0x7f ? '?' : v[i];
  }
  if (to < v.size()) out += "...";
  return "'" + out + "'";
}

}  // namespace

// What makes results comparable: one model (card and pattern), one cluster, one batch.
std::string run_identity(const nlohmann::json& r) {
  std::string id;
  for (const IdentityPart& p : identity_parts(r)) id += (id.empty() ? "" : "|") + p.value;
  return id;
}

std::string identity_difference(const nlohmann::json& a, const nlohmann::json& b) {
  const std::vector<IdentityPart> x = identity_parts(a), y = identity_parts(b);
  std::string out;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (x[k].value == y[k].value) continue;
    std::size_t at = 0;
    while (at < x[k].value.size() && at < y[k].value.size() && x[k].value[at] == y[k].value[at]) ++at;
    out += std::string(out.empty() ? "" : "; ") + x[k].name + " " + shown(x[k].value, at) + " vs " +
           shown(y[k].value, at);
  }
  return out;
}

}  // namespace ht::cli
