// rapidcheck properties of the structure built on a parsed pattern: physical and logical counts,
// pipeline stages that tile the model, single-rule pipeline violations (R5-R8, G4), checkpoint
// key prefixes that are unique exactly when no group's namespaces collide, and flatten().
#include <rapidcheck/catch.h>

#include <map>
#include <set>

#include "ht/verify/namespace_oracle.hpp"
#include "ht/verify/pattern_gen.hpp"
#include "ht/verify/pipeline_gen.hpp"
#include "pattern_test_support.hpp"

using namespace ht::patterns;
namespace pg = ht::verify::gen;

namespace {

using ht::verify::owned_namespaces;

bool collides(const Item& item) { return ht::verify::namespaces_collide(item); }

void assert_rule(const std::string& code, const std::function<void()>& action) {
  try {
    action();
  } catch (const PatternError& e) {
    RC_ASSERT(std::string(rule_code(e.rule())) == code);
    return;
  }
  RC_FAIL("no error, expected " + code);
}

PipelineConfig config(int pp, std::optional<int> vpp = std::nullopt) {
  PipelineConfig c;
  c.pp = pp;
  c.vpp = vpp;
  return c;
}

}  // namespace

TEST_CASE("the physical count is the flattened length and the logical count the item count", "[patterns][property]") {
  rc::prop("counts", [] {
    const pg::PatternModel m = *pg::valid_pattern();
    const ParsedPattern p = parse(m.text());
    RC_ASSERT(p.physical_count() == static_cast<int>(m.flattened().size()));
    RC_ASSERT(p.flattened_symbols() == m.flattened());
    RC_ASSERT(p.logical_count() == static_cast<int>(m.items().size()));
    int total = 0;
    for (const auto& [symbol, n] : layer_counts(p)) total += n;
    RC_ASSERT(total == p.physical_count() + m.expected_depth() * static_cast<int>(m.mtp.size()));
  });
}

TEST_CASE("pipeline stages of a piped pattern follow one another and tile the model", "[patterns][property]") {
  rc::prop("offsets add up", [] {
    const int pp = *rc::gen::inRange(1, 4);
    const int vpp = *rc::gen::inRange(1, 4);
    const ParsedPattern p = parse((*pg::piped_pattern(pp, vpp)).text());
    const auto stages = allocate_stages(p, config(pp, vpp));
    RC_ASSERT(static_cast<int>(stages.size()) == pp * vpp);
    int physical = 0, logical = 0;
    std::vector<Item> all;
    for (std::size_t k = 0; k < stages.size(); ++k) {
      const StageSlice& s = stages[k];
      RC_ASSERT(s.pp_rank == static_cast<int>(k) % pp);
      RC_ASSERT(s.vp_stage == static_cast<int>(k) / pp);
      RC_ASSERT(s.physical_offset == physical);
      RC_ASSERT(s.logical_offset == logical);
      physical += s.physical_count();
      logical += static_cast<int>(s.items.size());
      all.insert(all.end(), s.items.begin(), s.items.end());
    }
    RC_ASSERT(physical == p.physical_count());
    RC_ASSERT(all == p.items());
  });
}

TEST_CASE("the legacy split gives every rank N/pp consecutive layers", "[patterns][property]") {
  rc::prop("even legacy split", [] {
    const int pp = *rc::gen::inRange(1, 5);
    const int per_rank = *rc::gen::inRange(0, 5);
    const ParsedPattern p = parse((*pg::flat_pattern(pp * per_rank)).text());
    const auto stages = allocate_stages(p, config(pp));
    RC_ASSERT(static_cast<int>(stages.size()) == pp);
    for (int r = 0; r < pp; ++r) {
      RC_ASSERT(stages[r].physical_offset == r * per_rank);
      RC_ASSERT(stages[r].logical_offset == r * per_rank);
      RC_ASSERT(stages[r].physical_count() == per_rank);
    }
  });
}

namespace {

// Runs the allocation a violation asks for; it must fail with exactly the violation's rule.
void assert_pipeline_rejected(const pg::PipelineViolation& v) {
  const ParsedPattern p = parse(v.text);
  assert_rule(v.code, [&] {
    if (v.pp_rank)
      (void)select_stage(p, v.config, *v.pp_rank, v.vp_stage);
    else
      (void)allocate_stages(p, v.config);
  });
}

}  // namespace

TEST_CASE("pipes with first or last stage layer counts are rejected as R5", "[patterns][property][R5]") {
  rc::prop("R5", [] { assert_pipeline_rejected(*pg::r5_violation()); });
}

TEST_CASE("a virtual stage of a pipe-less pattern on pp > 1 is rejected as R6", "[patterns][property][R6]") {
  rc::prop("R6", [] { assert_pipeline_rejected(*pg::r6_violation()); });
}

TEST_CASE("a legacy split with N % pp != 0 is rejected as R7", "[patterns][property][R7]") {
  rc::prop("R7", [] { assert_pipeline_rejected(*pg::r7_violation()); });
}

TEST_CASE("a segment count that pp does not divide is rejected as R8", "[patterns][property][R8]") {
  rc::prop("R8", [] { assert_pipeline_rejected(*pg::r8_violation()); });
}

TEST_CASE("a legacy split boundary inside a group is rejected as G4", "[patterns][property][G4]") {
  rc::prop("G4", [] { assert_pipeline_rejected(*pg::g4_violation()); });
}

TEST_CASE("grouped key prefixes are unique exactly when no group's namespaces collide", "[patterns][property][G5]") {
  rc::prop("unique (logical, namespace) iff disjoint", [] {
    const pg::PatternModel m = *pg::loosely_grouped_pattern();
    const ParsedPattern p = parse(m.text(), ParseOptions{.check_namespaces = false});
    bool any_collision = false;
    for (const Item& item : p.items()) {
      RC_ASSERT(namespaces_disjoint(item) == !collides(item));
      any_collision = any_collision || collides(item);
    }
    std::set<std::string> prefixes;
    bool unique = true;
    for (const auto& keys : layer_keys(p))
      for (const auto& prefix : keys.namespace_prefixes()) unique = prefixes.insert(prefix).second && unique;
    RC_ASSERT(unique == !any_collision);
    bool strict_accepts = true;
    try {
      (void)parse(m.text());
    } catch (const PatternError& e) {
      RC_ASSERT(std::string(rule_code(e.rule())) == "G5");
      strict_accepts = false;
    }
    RC_ASSERT(strict_accepts == !any_collision);
  });
}

TEST_CASE("flatten keeps the physical order and its keys are the physical indices", "[patterns][property]") {
  rc::prop("flatten", [] {
    const ParsedPattern p = parse((*pg::valid_pattern()).text());
    const ParsedPattern flat = flatten(p);
    RC_ASSERT(!flat.has_groups());
    RC_ASSERT(flat.flattened_symbols() == p.flattened_symbols());
    RC_ASSERT(flat.segment_count() == p.segment_count());
    RC_ASSERT(flat.mtp == p.mtp);
    RC_ASSERT(flat.mtp_depths == p.mtp_depths);
    const auto keys = layer_keys(flat);
    RC_ASSERT(static_cast<int>(keys.size()) == p.physical_count());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      RC_ASSERT(keys[i].physical == static_cast<int>(i));
      RC_ASSERT(keys[i].logical == static_cast<int>(i));
      RC_ASSERT(keys[i].key_prefix == "decoder.layers." + std::to_string(i) + ".");
    }
  });
}

TEST_CASE("every member of a group publishes under its group's logical index", "[patterns][property]") {
  rc::prop("logical keys", [] {
    const ParsedPattern p = parse((*pg::valid_pattern()).text());
    const auto keys = layer_keys(p);
    std::size_t k = 0;
    const auto items = p.items();
    for (std::size_t logical = 0; logical < items.size(); ++logical)
      for (char c : items[logical].symbols) {
        RC_ASSERT(k < keys.size());
        RC_ASSERT(keys[k].symbol == c);
        RC_ASSERT(keys[k].logical == static_cast<int>(logical));
        RC_ASSERT(keys[k].physical == static_cast<int>(k));
        RC_ASSERT(keys[k].namespaces == owned_namespaces(c));
        ++k;
      }
    RC_ASSERT(k == keys.size());
  });
}
