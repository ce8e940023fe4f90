// Tests over patterns/examples/*.pattern, the real published hybrid patterns: every file parses,
// the layer counts match the model cards, and each grouped variant "<base>-grouped*.pattern" has
// exactly its base pattern's physical layers. The folder comes from the build
// (HT_PATTERN_EXAMPLES_DIR), so the tests read the checked-in files themselves.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "pattern_test_support.hpp"

using namespace ht::patterns;
namespace fs = std::filesystem;

namespace {

const fs::path kExamples = HT_PATTERN_EXAMPLES_DIR;

// The first line that is neither empty nor a '#' comment.
std::string pattern_in(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') return line;
  FAIL("no pattern line in " << file);
  return {};
}

std::map<std::string, std::string> all_examples() {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::directory_iterator(kExamples))
    if (entry.path().extension() == ".pattern") out[entry.path().stem().string()] = pattern_in(entry.path());
  return out;
}

}  // namespace

TEST_CASE("every example pattern file parses", "[patterns][examples]") {
  const auto examples = all_examples();
  REQUIRE(examples.size() >= 6);
  for (const auto& [name, text] : examples) {
    INFO(name << ": '" << text << "'");
    CHECK_NOTHROW(parse(text));
  }
}

TEST_CASE("every example file says in a comment where its pattern comes from", "[patterns][examples]") {
  for (const auto& entry : fs::directory_iterator(kExamples)) {
    if (entry.path().extension() != ".pattern") continue;
    INFO(entry.path().filename().string());
    std::ifstream in(entry.path());
    std::string line, comments;
    while (std::getline(in, line) && !line.empty() && line[0] == '#') comments += line + "\n";
    const bool cited = comments.find("Source:") != std::string::npos ||
                       comments.find("DERIVED") != std::string::npos ||
                       comments.find("variant of") != std::string::npos;
    CHECK(cited);
  }
}

TEST_CASE("at least six example files are published patterns, not grouped variants", "[patterns][examples]") {
  int published = 0;
  for (const auto& [name, text] : all_examples())
    if (name.find("-grouped") == std::string::npos) ++published;
  CHECK(published >= 6);
}

TEST_CASE("each grouped example flattens to its base example's physical layers", "[patterns][examples]") {
  const auto examples = all_examples();
  int grouped = 0;
  for (const auto& [name, text] : examples) {
    const auto cut = name.find("-grouped");
    if (cut == std::string::npos) continue;
    ++grouped;
    const std::string base = name.substr(0, cut);
    INFO(name << " against " << base);
    REQUIRE(examples.count(base));
    const ParsedPattern variant = parse(text);
    const ParsedPattern original = parse(examples.at(base));
    CHECK(variant.has_groups());
    CHECK(variant.flattened_symbols() == original.flattened_symbols());
    CHECK(flatten(variant).flattened_symbols() == original.flattened_symbols());
    CHECK(variant.logical_count() < original.logical_count());
  }
  CHECK(grouped >= 2);
}

// Layer counts stated in the model cards / papers named in each file's comment.
TEST_CASE("example layer counts match the published model descriptions", "[patterns][examples]") {
  struct Expected {
    const char* name;
    int total, mamba, attention, mlp, moe;
  };
  const Expected table[] = {
      {"nemotron-h-8b", 52, 24, 4, 24, 0},          // Nemotron-H 8B: 24 Mamba-2, 24 MLP, 4 attention
      {"nemotron-h-56b", 118, 54, 10, 54, 0},       // Nemotron-H 56B: 54 Mamba-2, 54 MLP, 10 attention
      {"nemotron-nano-9b-v2", 56, 27, 4, 25, 0},    // Nano 9B v2: 27 Mamba, 25 MLP, 4 attention
      {"nemotron-3-nano", 52, 23, 6, 0, 23},        // Nemotron 3 Nano: 23 Mamba-2, 23 MoE, 6 attention
      {"qwen3-next", 96, 0, 12, 0, 48},             // 48 blocks: 36 GDN + 12 attention, each with MoE
  };
  const auto examples = all_examples();
  for (const Expected& e : table) {
    INFO(e.name);
    REQUIRE(examples.count(e.name));
    const ParsedPattern p = parse(examples.at(e.name));
    const auto counts = layer_counts(p);
    CHECK(p.physical_count() == e.total);
    CHECK(counts.at('M') == e.mamba);
    CHECK(counts.at('*') == e.attention);
    CHECK(counts.at('-') == e.mlp);
    CHECK(counts.at('E') == e.moe);
  }
  CHECK(layer_counts(parse(examples.at("qwen3-next"))).at('G') == 36);
}

TEST_CASE("Nemotron 3 Super's example carries its two MTP depths of '*E'", "[patterns][examples]") {
  const ParsedPattern p = parse(all_examples().at("nemotron-3-super-mtp"));
  CHECK(p.physical_count() == 88);
  CHECK(p.mtp == "*E");
  CHECK(p.mtp_depths == 2);
}

TEST_CASE("the pipelined Qwen3-Next example gives PP=4 equal stages, or PP=2 with VPP=2", "[patterns][examples]") {
  const ParsedPattern p = parse(all_examples().at("qwen3-next-grouped-pp4"));
  PipelineConfig four;
  four.pp = 4;
  const auto stages = allocate_stages(p, four);
  REQUIRE(stages.size() == 4);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(stages[r].physical_count() == 24);
    CHECK(stages[r].items.size() == 12);
    CHECK(stages[r].physical_offset == 24 * r);
    CHECK(stages[r].logical_offset == 12 * r);
  }
  PipelineConfig interleaved;
  interleaved.pp = 2;
  interleaved.vpp = 2;
  const auto chunks = allocate_stages(p, interleaved);
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[2].pp_rank == 0);
  CHECK(chunks[2].vp_stage == 1);
  CHECK(chunks[2].physical_offset == 48);
}

TEST_CASE("Nemotron-H 8B cannot import a GPT checkpoint: 4 attention but 24 MLP layers (C1)", "[patterns][examples]") {
  const ParsedPattern p = parse(all_examples().at("nemotron-h-8b"));
  CHECK(rule_code(ht::patterns::test::error_of([&] { (void)gpt_layer_map(p); }).rule()) == "C1");
}
