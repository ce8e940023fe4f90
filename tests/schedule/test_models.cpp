// Model cards, parameter counts, model FLOPs and per-GPU memory against independent numbers: the
// published parameter counts named in each card, the dense GPT's closed-form FLOPs, and memory
// of small configurations counted by hand here.
#include <catch2/catch.hpp>
#include <rapidcheck/catch.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "helpers.hpp"
#include "ht/schedule/error.hpp"
#include "ht/schedule/flops.hpp"
#include "ht/schedule/memory.hpp"
#include "ht/schedule/model_card.hpp"
#include "ht/schedule/params.hpp"

using namespace ht::schedule;
using namespace ht::schedule::test;

namespace {

std::string pattern_file_line(const std::string& name) {
  std::ifstream in(std::string(HT_SOURCE_DIR) + "/patterns/examples/" + name + ".pattern");
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line.front() != '#') return line;
  return "";
}

}  // namespace

TEST_CASE("every shipped card's computed parameters match its published count within 2 %", "[schedule][models]") {
  const auto names = model_card_names();
  REQUIRE(names.size() >= 20);
  int compared = 0;
  for (const std::string& name : names) {
    INFO(name);
    const ModelCard card = model_card(name);
    CHECK(card.name == name);
    CHECK_FALSE(card.source.empty());
    const auto pattern = ht::patterns::parse(card.pattern);
    const ModelParams p = count_params(pattern, card.dims);
    if (card.published.total <= 0) {
      CHECK_FALSE(card.extends.empty());  // a grouped variant: its base card carries the counts
      const ModelParams base = count_params(ht::patterns::parse(model_card(card.extends).pattern), card.dims);
      CHECK(p.total == base.total);  // grouping does not change a single weight
      continue;
    }
    const double total = p.total - (card.published.includes_mtp ? 0.0 : p.mtp);
    CHECK(std::abs(total - card.published.total) <= 0.02 * card.published.total);
    double active = p.active - p.mtp_active;
    if (!card.published.active_includes_embeddings) active -= p.embedding + p.output;
    CHECK(std::abs(active - card.published.active) <= 0.02 * card.published.active + card.published.active_rounding);
    ++compared;
  }
  CHECK(compared >= 15);
}

TEST_CASE("the named production models are shipped and example cards carry their pattern files' patterns",
          "[schedule][models]") {
  for (const char* name : {"qwen3-next-80b-a3b", "qwen3-235b-a22b", "qwen3-30b-a3b", "deepseek-v3", "nemotron-h-8b",
                           "nemotron-h-56b", "nemotron-3-nano", "mixtral-8x7b"})
    CHECK_NOTHROW(model_card(name));
  for (const std::string& name : model_card_names()) {
    const std::string line = pattern_file_line(name);
    if (line.empty()) continue;
    INFO(name);
    CHECK(model_card(name).pattern == line);
  }
  // Hand count of Mixtral-8x7B's experts: 32 layers x 8 experts x 3 x 4096 x 14336.
  const ModelParams mixtral = count_params(ht::patterns::parse(model_card("mixtral-8x7b").pattern), model_card("mixtral-8x7b").dims);
  CHECK(mixtral.experts == 32.0 * 8 * 3 * 4096 * 14336);
  try {
    model_card("gpt-5");
    FAIL("an unknown card was accepted");
  } catch (const ScheduleError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("qwen3-235b-a22b"));
  }
  CHECK_THROWS_AS(parse_model_card(R"({"pattern": "*-", "dims": {"hidden": 64}, "colour": 1})", "x"), ScheduleError);
  CHECK_THROWS_AS(parse_model_card(R"({"pattern": "*-", "extends": "nope"})", "x"), ScheduleError);
}

TEST_CASE("a dense GPT's model FLOPs equal the closed form 72 B s L h^2 (1 + s / 12h + V / 12hL)",
          "[schedule][models]") {
  ModelDims d;
  d.hidden = 1024;
  d.num_heads = 16;
  d.num_kv_heads = 16;
  d.head_dim = 64;
  d.ffn_hidden = 4096;
  d.gated_ffn = 0;
  d.vocab = 32000;
  d.seq_len = 2048;
  const int layers = 12;
  std::string pattern;
  for (int i = 0; i < layers; ++i) pattern += "*-";
  const double b = 512, s = d.seq_len, h = d.hidden, v = d.vocab, l = layers;
  const double closed = 72 * b * s * l * h * h * (1 + s / (12 * h) + v / (12 * h * l));
  CHECK(model_flops_per_step(ht::patterns::parse(pattern), d, b) == Approx(closed).epsilon(1e-12));
}

TEST_CASE("per-GPU memory of small layouts, counted by hand", "[schedule][models]") {
  const ModelDims d = tiny_model();  // h 64, 4 heads of 16, 2 kv heads, ffn 128, vocab 128, 2 x 32 tokens
  // Parameters: '*' 64 (64 + 2 x 32) + 64 x 64 + 64 = 12352; '-' 3 x 64 x 128 + 64 = 24640;
  // embedding 128 x 64 = 8192; output 8192 + 64 (final norm).
  const double attn = 12352, mlp = 24640, emb = 8192, out = 8256;
  // Activations per token (64 tokens): '*' (2 x 64 + 2 x 64 + 2 x 16 x 2) x 2 bytes + 4 x 4 fp32 = 656;
  // '-' (2 x 64 + 128 + 128) x 2 = 1024; token ids 8 bytes; output (2 x 64 x 2 + 4 x 128) = 768.
  const double a_attn = 656 * 64.0, a_mlp = 1024 * 64.0, a_emb = 8 * 64.0, a_out = 768 * 64.0;
  ParallelConfig one = parallel(1, 1, 2);
  const MemoryBreakdown m1 = peak_memory(ht::patterns::parse("*-"), d, one, make_plan("*-", one, options(false, false)));
  CHECK(m1.parameters == attn + mlp + emb + out);
  CHECK(m1.weights == 2 * m1.parameters);
  CHECK(m1.gradients == 4 * m1.parameters);
  CHECK(m1.optimizer == 12 * m1.parameters);
  CHECK(m1.activations == Approx(a_emb + a_attn + a_mlp + a_out));  // one microbatch at a time
  CHECK(m1.microbatches_in_flight == 1);
  // 1F1B over pp 2 with 4 microbatches: stage 0 warms up one forward, so two microbatches of its
  // embedding and two layers are alive at its peak.
  ParallelConfig two = parallel(1, 1, 4, 2);
  const MemoryBreakdown m2 = peak_memory(ht::patterns::parse("*-*-"), d, two, make_plan("*-*-", two, options(false, false)));
  CHECK(m2.rank == 0);
  CHECK(m2.parameters == attn + mlp + emb);
  CHECK(m2.microbatches_in_flight == 2);
  CHECK(m2.activations == Approx(2 * (a_emb + a_attn + a_mlp)));
  // The distributed optimizer shards the 12 bytes over dp x cp.
  ParallelConfig dist = parallel(1, 2, 1);
  dist.optimizer.sync = GradSync::Megatron;
  dist.optimizer.distributed = true;
  const MemoryBreakdown m3 = peak_memory(ht::patterns::parse("*-"), d, dist, make_plan("*-", dist, options(false, false)));
  CHECK(m3.optimizer == 6 * m3.parameters);
  // Full recomputation keeps each layer's input (h per token) and one layer's working set.
  ParallelConfig full = one;
  full.recompute.full = true;
  const MemoryBreakdown m4 = peak_memory(ht::patterns::parse("*-"), d, full, make_plan("*-", full, options(false, false)));
  const double input = 64.0 * 64 * 2;
  // Peak: while the last layer ('-') rematerialises, the first keeps only its input.
  CHECK(m4.activations == Approx(a_emb + input + a_mlp));
}

TEST_CASE("a plan of saturated_microbatches reaches the activation peak of any larger count",
          "[schedule][models]") {
  // The full build against the short one, over pipelines with and without interleaving, with and
  // without the EP overlap, recomputation on and off: the peak (and where it is) are the same.
  const ModelDims d = tiny_model();
  struct Case {
    const char* pattern;
    int pp, vpp, ep;
    bool overlap, recompute;
  };
  const Case cases[] = {{"[*E][*E]", 1, 0, 2, false, false},     {"[*E][*E]", 1, 0, 2, true, false},
                        {"[*E][*E]|[*E][*E]", 2, 0, 2, false, true}, {"*-*-*-*-", 4, 0, 1, false, false},
                        {"*-*-*-*-*-*-*-*-", 2, 2, 1, false, false}, {"[*E][*E][*E][*E][*E][*E]", 3, 2, 2, false, true},
                        {"[*E][*E][*E][*E][*E][*E][*E][*E]", 2, 4, 2, true, false},
                        {"*-*-*-*-*-*-*-*-*-*-*-*-", 4, 3, 1, false, false}};
  for (const Case& c : cases)
    for (int groups : {3, 8, 12}) {
      ParallelConfig cfg = parallel(c.ep, c.ep, groups * c.pp, c.pp, c.vpp);
      cfg.recompute.full = c.recompute;
      const ScheduleOptions o = options(c.overlap, c.overlap);
      const auto parsed = ht::patterns::parse(c.pattern);
      const MemoryBreakdown full = peak_memory(parsed, d, cfg, make_plan(c.pattern, cfg, o, d));
      ParallelConfig short_cfg = cfg;
      short_cfg.microbatches = saturated_microbatches(cfg, c.overlap);
      INFO(c.pattern << " pp " << c.pp << " vpp " << c.vpp << " overlap " << c.overlap << " microbatches "
                     << cfg.microbatches << " -> " << short_cfg.microbatches);
      CHECK(short_cfg.microbatches <= cfg.microbatches);
      CHECK(short_cfg.microbatches % c.pp == 0);
      const MemoryBreakdown short_peak = peak_memory(parsed, d, short_cfg, make_plan(c.pattern, short_cfg, o, d));
      CHECK(short_peak.activations == Approx(full.activations).epsilon(1e-12));
      CHECK(short_peak.total() == Approx(full.total()).epsilon(1e-12));
      CHECK(short_peak.rank == full.rank);
    }
}

// Issue 30 item 3: weights, gradients and optimizer state per rank by a second, deliberately plain
// count on generated layouts (TP, PP, EP, ETP, EDP, the distributed optimizer on and off), from
// the tiny model's dimensions and megatron-parallel.md 8.1: '*' a norm and q, k, v, o split over
// TP; '-' a norm and three SwiGLU matrices split over TP; 'E' a norm and the router, replicated,
// and ep-th of the experts, each split over expert TP; the embedding on the first stage and the
// output layer with the final norm on the last, split over TP; 2 bytes of weights, 4 of fp32
// gradients and 12 of optimizer state a parameter, the latter sharded over dp (dense) and edp
// (experts) by the distributed optimizer.
TEST_CASE("per-rank weights, gradients and optimizer state by a plain count on generated layouts",
          "[schedule][models][property]") {
  rc::prop("plain count == peak_memory's state", [] {
    const ModelDims d = tiny_model();
    const std::string pattern = *rc::gen::element<std::string>("*-*-", "*E*E", "*E", "*-", "*E-E");
    const bool moe = pattern.find('E') != std::string::npos;
    ParallelConfig c;
    c.tp = *rc::gen::element(1, 2);
    c.pp = *rc::gen::element(1, 2);
    c.ep = moe ? *rc::gen::element(1, 2, 4) : 1;
    c.etp = moe ? *rc::gen::element(1, 2) : 1;
    c.dp = *rc::gen::element(1, 2, 4);
    RC_PRE((c.tp * c.dp) % (c.ep * c.etp) == 0);
    RC_PRE(static_cast<int>(pattern.size()) % c.pp == 0);
    c.microbatches = 2 * c.pp;
    c.optimizer.sync = GradSync::Megatron;
    c.optimizer.distributed = *rc::gen::arbitrary<bool>();
    Plan plan;
    try {
      plan = make_plan(pattern, c, options(false, false), d);
    } catch (const ht::schedule::ScheduleError&) {
      RC_DISCARD("layout refused");
    }
    const MemoryBreakdown m = peak_memory(ht::patterns::parse(pattern), d, c, plan);
    const int stage = m.rank / (c.tp * c.dp);
    const int per_stage = static_cast<int>(pattern.size()) / c.pp;
    const double h = d.hidden, t = c.tp, q = double(d.num_heads) * d.head_dim, kv = double(d.num_kv_heads) * d.head_dim;
    double dense = 0, expert = 0;
    for (int i = stage * per_stage; i < (stage + 1) * per_stage; ++i) {
      switch (pattern[static_cast<std::size_t>(i)]) {
        case '*': dense += h + (h * q + 2 * h * kv + q * h) / t; break;
        case '-': dense += h + 3 * h * d.ffn_hidden / t; break;
        case 'E':
          dense += h + h * d.num_experts;
          expert += double(d.num_experts) / c.ep * 3 * h * d.moe_ffn_hidden / c.etp;
          break;
      }
    }
    if (stage == 0) dense += double(d.vocab) * h / t;
    if (stage == c.pp - 1) dense += double(d.vocab) * h / t + h;
    const int edp = c.tp * c.dp / (c.ep * c.etp);
    RC_ASSERT(m.parameters == dense + expert);
    RC_ASSERT(m.weights == 2 * (dense + expert));
    RC_ASSERT(m.gradients == 4 * (dense + expert));
    const double state = c.optimizer.distributed ? dense / c.dp + expert / edp : dense + expert;
    RC_ASSERT(std::abs(m.optimizer - 12 * state) <= 1e-9 * m.optimizer);
  });
}
