// Runs a property with rapidcheck's checker (rc::detail::checkProperty with explicit TestParams,
// so no RC_PARAMS or global configuration is involved) and recovers the shrunk case: the check's
// failure description carries the case as JSON after a marker, and the description rapidcheck
// reports is the one of the minimal failing case.
#include "ht/verify/runner.hpp"

#include <rapidcheck.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "ht/io/json_input.hpp"
#include "ht/verify/case_schema.hpp"

namespace ht::verify {
namespace {

constexpr std::string_view kCaseMarker = "\n@@case ";

// Counts finished cases for progress and the result table.
class CountingListener : public rc::detail::TestListener {
 public:
  explicit CountingListener(const std::function<void(int)>& on_case, int base) : on_case_(on_case), count_(base) {}
  void onTestCaseFinished(const rc::detail::CaseDescription& d) override {
    if (d.result.type == rc::detail::CaseResult::Type::Discard) return;
    ++count_;
    if (on_case_) on_case_(count_);
  }
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
  int count() const { return count_; }

 private:
  const std::function<void(int)>& on_case_;
  int count_;
};

std::string run_check(const Property& p, const Case& c) {
  try {
    p.check(c);
  } catch (const Falsified& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("unexpected error: ") + e.what();
  }
  return {};
}

// Splits a failure description into (message, case); the case is null when the marker is absent
// (a failure raised by rapidcheck itself, e.g. a generator error).
std::pair<std::string, Case> split_description(const std::string& description) {
  const auto at = description.rfind(kCaseMarker);
  if (at == std::string::npos) return {description, Case()};
  Case c = Case::parse(description.substr(at + kCaseMarker.size()), nullptr, false);
  if (c.is_discarded()) return {description, Case()};
  return {description.substr(0, at), c};
}

// rapidcheck prints its global configuration (with a seed we do not use) the first time it is
// loaded; load it once with stderr muted so the only seed on stderr is the one that counts.
void load_rapidcheck_quietly() {
  static const bool loaded = [] {
    std::ostringstream sink;
    auto* old = std::cerr.rdbuf(sink.rdbuf());
    (void)rc::detail::configuration();
    std::cerr.rdbuf(old);
    return true;
  }();
  (void)loaded;
}

std::uint64_t batch_seed(std::uint64_t seed, int batch) {
  return seed + static_cast<std::uint64_t>(batch) * 0x9E3779B97F4A7C15ull;
}

}  // namespace

void fail(const std::string& message) { throw Falsified(message); }

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::Pass: return "pass";
    case Outcome::Fail: return "fail";
    case Outcome::Skip: return "skip";
  }
  return "?";
}

RunResult run_property(const Property& property, const RunOptions& options) {
  using clock = std::chrono::steady_clock;
  RunResult r;
  r.property = property.name;
  const auto t0 = clock::now();
  const CaseSource source = property.cases(options.context);
  if (!source.gen) {
    r.outcome = Outcome::Skip;
    r.note = source.skip_reason;
    return r;
  }
  load_rapidcheck_quietly();
  const rc::Gen<Case> gen = *source.gen;
  const Property* p = &property;
  const auto prop = rc::detail::toProperty([gen, p] {
    const Case c = *gen;
    const std::string failure = run_check(*p, c);
    if (!failure.empty())
      throw rc::detail::CaseResult(rc::detail::CaseResult::Type::Failure,
                                   failure + std::string(kCaseMarker) + c.dump());
  });
  const bool timed = options.seconds > 0;
  int batch = 0, batch_cases = timed ? 10 : std::max(1, options.cases);
  for (;;) {
    rc::detail::TestParams params;
    params.seed = batch_seed(options.seed, batch);
    params.maxSuccess = batch_cases;
    params.disableShrinking = !options.shrink;
    rc::detail::TestMetadata meta;
    meta.id = property.name;
    meta.description = property.summary;
    CountingListener listener(options.on_case, r.cases);
    const auto result = rc::detail::checkProperty(prop, meta, params, listener);
    r.cases = listener.count();
    if (!result.is<rc::detail::SuccessResult>()) {
      r.outcome = Outcome::Fail;
      std::string description;
      if (result.is<rc::detail::FailureResult>()) {
        description = result.get<rc::detail::FailureResult>().description;
      } else {
        std::ostringstream os;
        rc::detail::printResultMessage(result, os);
        description = os.str();
      }
      auto [message, input] = split_description(description);
      r.note = message;
      if (!input.is_null()) r.counterexample = Counterexample{property.name, params.seed, input, message};
      break;
    }
    ++batch;
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    if (!timed || elapsed >= options.seconds) break;
    // Aim for batches of about a quarter second, so the budget is kept closely.
    const double rate = r.cases / std::max(elapsed, 1e-6);
    batch_cases = std::clamp(static_cast<int>(rate * 0.25), 1, 100000);
  }
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

std::optional<std::string> replay(const Counterexample& ce) {
  const Property* p = find_property(ce.property);
  if (!p) throw std::invalid_argument("unknown property '" + ce.property + "'");
  validate_case(ce.input);
  try {
    p->check(ce.input);
  } catch (const Falsified& e) {
    return std::string(e.what());
  } catch (const nlohmann::json::exception& e) {
    // A field the check needs is missing or of another type: the file, not the property, is wrong.
    throw BadCase("input: " + io::json_error_text(e));
  } catch (const std::exception& e) {
    return std::string("unexpected error: ") + e.what();
  }
  return std::nullopt;
}

}  // namespace ht::verify
