// What `merge` reads (the JSON of `simulate --json` / `search --json`): the schema check that
// names the file and the key of a refusal, and the identity that says which results compare (one
// model, one cluster, one batch). Apart from cmd_search.cpp so the fuzz target can drive it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ht::cli {

// Throws UsageError "'FILE': what" for a result `merge` cannot rank; `needs_rate`: the GPU count
// must be there too (time and cost to train).
void check_result(const std::string& file, const nlohmann::json& r, bool needs_rate);
// "model|pattern|platform|seq_len|gbs" of a checked result: equal identities compare.
std::string run_identity(const nlohmann::json& r);
// What differs between two results' identities, for messages: each differing part named, both
// sides shown (around the first difference when long), e.g. "global batch 32 vs 64".
std::string identity_difference(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace ht::cli
