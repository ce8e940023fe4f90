// Checkpoints: round trips give the same bits, grouped and flattened patterns load each other's
// checkpoints (reference 2.5 key rules) with identical outputs, resume continues a run bit for
// bit, and every kind of damaged or mismatched file is refused with a clear error while the
// model keeps its previous values. GPT import follows gpt_layer_map (reference 2.5).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "fd.hpp"
#include "ht/engine/checkpoint.hpp"
#include "ht/engine/data.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/safetensors.hpp"
#include "ht/patterns/pattern.hpp"

using namespace ht::engine;
namespace fs = std::filesystem;
namespace pat = ht::patterns;

namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 32;
  c.hidden = 8;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.ffn_hidden = 8;
  c.num_experts = 3;
  c.moe_topk = 2;
  c.moe_ffn_hidden = 4;
  c.moe_shared_ffn_hidden = 4;
  c.mamba_state_dim = 4;
  c.mamba_head_dim = 4;
  c.mamba_num_heads = 2;
  c.mamba_conv_kernel = 3;
  return c;
}

struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("ht-engine-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// The data file a checkpoint's manifest names for `role` ("model", "optimizer").
fs::path data_file(const fs::path& dir, const char* role) {
  std::ifstream in(dir / "manifest.json");
  const auto j = nlohmann::json::parse(in);
  return dir / j.at("files").at(role).at("file").get<std::string>();
}

Batch batch_of(int seed) {
  Rng rng(static_cast<std::uint64_t>(seed));
  Batch b{Tensor<int>({2, 6}), Tensor<int>({2, 6})};
  for (auto& v : b.tokens.data) v = rng.below(32);
  for (auto& v : b.targets.data) v = rng.below(32);
  return b;
}

std::vector<Tensor<float>> values(HybridModel<float>& m) {
  std::vector<Tensor<float>> out;
  for (auto& p : m.parameters()) out.push_back(*p.value);
  return out;
}

void train_steps(HybridModel<float>& m, AdamWState<float>& st, int from, int count) {
  for (int s = from; s < from + count; ++s) {
    m.zero_grad();
    m.forward(batch_of(100 + s));
    m.backward();
    auto ps = m.parameters();
    adamw_step(AdamWConfig{}, st, ps);
  }
}

void overwrite(const fs::path& file, std::size_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void write_raw(const fs::path& file, const std::string& header_json, const std::string& data) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((header_json.size() >> (8 * i)) & 0xff);
  std::ofstream(file, std::ios::binary) << len << header_json << data;
}

std::string checkpoint_error(const std::string& dir, HybridModel<float>& m) {
  try {
    load_checkpoint(dir, m, nullptr);
  } catch (const EngineError& e) {
    CHECK(e.code() == ErrorCode::BadCheckpoint);
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint round trip restores the same bits", "[engine][checkpoint]") {
  TempDir dir;
  const auto p = pat::parse("M[*E]-/*E");
  HybridModel<float> a(p, small_config(), 1), b(p, small_config(), 2);
  save_checkpoint(dir.str(), a, nullptr, 7, 1);
  CHECK(read_manifest(dir.str()).step == 7);
  CHECK(load_checkpoint(dir.str(), b, nullptr).pattern == "M[*E]-/*E");
  CHECK(values(a) == values(b));
  const Batch batch = batch_of(3);
  CHECK(a.forward(batch).total == b.forward(batch).total);
  CHECK(a.logits() == b.logits());
}

TEST_CASE("grouped and flattened checkpoints load into each other with identical outputs", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  const Batch batch = batch_of(4);
  for (auto [from, to] : {std::pair{"M[*E]-", "M*E-"}, std::pair{"M*E-", "M[*E]-"},
                          std::pair{"[M*E][M-]", "M*EM-"}}) {
    INFO(from << " -> " << to);
    TempDir dir;
    HybridModel<float> src(pat::parse(from), cfg, 11), dst(pat::parse(to), cfg, 12);
    save_checkpoint(dir.str(), src, nullptr, 0, 11);
    load_checkpoint(dir.str(), dst, nullptr);
    CHECK(src.forward(batch).total == dst.forward(batch).total);
    CHECK(src.logits() == dst.logits());
  }
  // The key names are the pattern library's: logical for groups, final_layernorm iff '['.
  TempDir dir;
  HybridModel<float> g(pat::parse("M[*E]-"), cfg, 1);
  save_checkpoint(dir.str(), g, nullptr, 0, 1);
  const auto file = read_safetensors(data_file(dir.path, "model").string());
  CHECK(file.tensors.count("decoder.layers.1.self_attention.linear_qkv.weight"));
  CHECK(file.tensors.count("decoder.layers.1.mlp.router.weight"));
  CHECK(file.tensors.count("decoder.layers.1.pre_mlp_layernorm.weight"));
  CHECK(file.tensors.count("decoder.layers.2.mlp.linear_fc1.weight"));
  CHECK(file.tensors.count("decoder.final_layernorm.weight"));
  CHECK_FALSE(file.tensors.count("decoder.layers.3.mlp.linear_fc1.weight"));
}

TEST_CASE("resume from a checkpoint continues the run bit for bit, across grouping", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> straight(pat::parse("M[*E]-"), cfg, 5);
  AdamWState<float> st;
  train_steps(straight, st, 0, 4);

  TempDir dir;
  HybridModel<float> first(pat::parse("M[*E]-"), cfg, 5);
  AdamWState<float> st1;
  train_steps(first, st1, 0, 2);
  save_checkpoint(dir.str(), first, &st1, 2, 5);
  HybridModel<float> resumed(pat::parse("M*E-"), cfg, 99);  // flattened, other init
  AdamWState<float> st2;
  CHECK(load_checkpoint(dir.str(), resumed, &st2).step == 2);
  CHECK(st2.step == 2);
  train_steps(resumed, st2, 2, 2);
  CHECK(values(straight) == values(resumed));
}

TEST_CASE("damaged or mismatched checkpoints are refused and nothing is half-loaded", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
  HybridModel<float> dst(pat::parse("M*E-"), cfg, 2);
  const auto before = values(dst);
  auto fresh = [&](TempDir& d) { save_checkpoint(d.str(), src, nullptr, 0, 1); };

  SECTION("truncated file") {
    TempDir d;
    fresh(d);
    fs::resize_file(data_file(d.path, "model"), fs::file_size(data_file(d.path, "model")) - 10);
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("truncated"));
  }
  SECTION("corrupted data byte") {
    TempDir d;
    fresh(d);
    overwrite(data_file(d.path, "model"), fs::file_size(data_file(d.path, "model")) - 3, "\x7f");
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("corrupted"));
  }
  SECTION("missing manifest") {
    TempDir d;
    fresh(d);
    fs::remove(d.path / "manifest.json");
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("no checkpoint"));
  }
  SECTION("other physical layers") {
    TempDir d;
    HybridModel<float> other(pat::parse("M*--"), cfg, 1);
    save_checkpoint(d.str(), other, nullptr, 0, 1);
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("does not have the physical layers"));
  }
  SECTION("missing keys (no shared expert in the file)") {
    TempDir d;
    ModelConfig no_shared = cfg;
    no_shared.moe_shared_ffn_hidden = 0;
    HybridModel<float> other(pat::parse("M*E-"), no_shared, 1);
    save_checkpoint(d.str(), other, nullptr, 0, 1);
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("missing"));
  }
  SECTION("extra keys (a shared expert the model lacks)") {
    TempDir d;
    ModelConfig no_shared = cfg;
    no_shared.moe_shared_ffn_hidden = 0;
    HybridModel<float> small(pat::parse("M*E-"), no_shared, 1);
    const auto small_before = values(small);
    save_checkpoint(d.str(), src, nullptr, 0, 1);
    CHECK_THAT(checkpoint_error(d.str(), small), Catch::Contains("unexpected tensor"));
    CHECK(values(small) == small_before);
  }
  SECTION("other shapes") {
    TempDir d;
    ModelConfig wide = cfg;
    wide.ffn_hidden = 12;
    HybridModel<float> other(pat::parse("M*E-"), wide, 1);
    save_checkpoint(d.str(), other, nullptr, 0, 1);
    CHECK_THAT(checkpoint_error(d.str(), dst), Catch::Contains("shape"));
  }
  CHECK(values(dst) == before);
}

TEST_CASE("safetensors reader rejects malformed files with a reason", "[engine][checkpoint]") {
  TempDir d;
  fs::create_directories(d.path);
  const auto f = d.path / "x.safetensors";
  const std::string four(16, '\0');  // 4 floats
  auto reason = [&] {
    try {
      read_safetensors(f.string());
    } catch (const EngineError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::ofstream(f, std::ios::binary) << "abc";
  CHECK_THAT(reason(), Catch::Contains("shorter than"));
  write_raw(f, std::string(50, ' '), "");
  overwrite(f, 0, std::string("\xff\xff\xff\xff\x00\x00\x00\x00", 8));
  CHECK_THAT(reason(), Catch::Contains("exceeds the file size"));
  write_raw(f, "{not json", four);
  CHECK_THAT(reason(), Catch::Contains("not valid JSON"));
  write_raw(f, R"({"a":{"dtype":"F16","shape":[4],"data_offsets":[0,16]}})", four);
  CHECK_THAT(reason(), Catch::Contains("only F32"));
  write_raw(f, R"({"a":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}})", four);
  CHECK_THAT(reason(), Catch::Contains("shape"));
  write_raw(f, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", four);
  CHECK_THAT(reason(), Catch::Contains("overlaps"));
  write_raw(f, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", four);
  CHECK_THAT(reason(), Catch::Contains("trailing"));
  write_raw(f, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", four.substr(0, 12));
  CHECK_THAT(reason(), Catch::Contains("outside the data section"));
  write_raw(f, R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})", four);
  CHECK_THAT(reason(), Catch::Contains("non-negative"));
  // A well-formed file by hand (an independent writer) reads back.
  std::string data(8, '\0');
  const float vals[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), vals, 8);
  write_raw(f, R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})", data);
  const auto ok = read_safetensors(f.string());
  CHECK(ok.metadata.at("k") == "v");
  CHECK(ok.tensors.at("w").shape == std::vector<int>{1, 2});
  CHECK(ok.tensors.at("w").data == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("GPT import maps attention and MLP layers and leaves Mamba layers fresh", "[engine][checkpoint]") {
  // A GPT checkpoint is what a '*-*-' model publishes, with the GPT final norm name.
  const ModelConfig cfg = small_config();
  HybridModel<float> gpt(pat::parse("*-*-"), cfg, 3);
  TempDir d;
  fs::create_directories(d.path);
  std::vector<std::pair<std::string, const Tensor<float>*>> tensors;
  std::map<std::string, const Tensor<float>*> gpt_values;
  for (auto& p : gpt.parameters()) {
    const std::string key = p.key == "decoder.final_norm.weight" ? "decoder.final_layernorm.weight" : p.key;
    tensors.emplace_back(key, p.value);
  }
  // GPT layer k = physical layers 2k ('*') and 2k+1 ('-') of "*-*-": rename to GPT indices.
  for (auto& [key, t] : tensors) {
    for (int phys = 0; phys < 4; ++phys) {
      const std::string pre = "decoder.layers." + std::to_string(phys) + ".";
      if (key.rfind(pre, 0) == 0) key = "decoder.layers." + std::to_string(phys / 2) + "." + key.substr(pre.size());
    }
    gpt_values[key] = t;
  }
  const auto file = (d.path / "gpt.safetensors").string();
  write_safetensors(file, tensors);

  HybridModel<float> hybrid(pat::parse("M*-M*-"), cfg, 4), untouched(pat::parse("M*-M*-"), cfg, 4);
  import_gpt(file, hybrid);
  std::map<std::string, Tensor<float>> fresh;
  for (auto& p : untouched.parameters()) fresh[p.key] = *p.value;
  for (auto& p : hybrid.parameters()) {
    INFO(p.key);
    if (p.key.find(".mixer.") != std::string::npos) {
      CHECK(*p.value == fresh.at(p.key));  // Mamba layers 0 and 3 keep their init
      continue;
    }
    std::string src = p.key;
    for (auto [phys, g] : {std::pair{1, 0}, {2, 0}, {4, 1}, {5, 1}}) {
      const std::string pre = "decoder.layers." + std::to_string(phys) + ".";
      if (src.rfind(pre, 0) == 0) src = "decoder.layers." + std::to_string(g) + "." + src.substr(pre.size());
    }
    if (src == "decoder.final_norm.weight") src = "decoder.final_layernorm.weight";
    CHECK(*p.value == *gpt_values.at(src));
  }
  // A pattern with more attention layers than the GPT file has fails and changes nothing.
  HybridModel<float> bigger(pat::parse("*-*-*-"), cfg, 4);
  const auto before = values(bigger);
  CHECK_THROWS_AS(import_gpt(file, bigger), EngineError);
  CHECK(values(bigger) == before);
}

TEST_CASE("batches are drawn from the text and depend only on seed and step", "[engine][data]") {
  TextCorpus c{"test", {}};
  const std::string text = "abcdefghijklmnopqrstuvwxyz";
  c.bytes.assign(text.begin(), text.end());
  const Batch a = sample_batch(c, 3, 5, 9, 4), b = sample_batch(c, 3, 5, 9, 4);
  CHECK(a.tokens == b.tokens);
  for (int i = 0; i < 15; ++i) {
    // targets are the next byte of the same window
    CHECK(a.targets[static_cast<size_t>(i)] == a.tokens[static_cast<size_t>(i)] + 1);
  }
  CHECK_THROWS_AS(sample_batch(c, 1, 26, 9, 0), EngineError);
  CHECK(builtin_text().size() > 1000);
}

// ---- hostile and interrupted checkpoints (issue: a checkpoint switches in one atomic step) -----

namespace {

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void edit_manifest(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j;
  {
    std::ifstream in(dir / "manifest.json");
    j = nlohmann::json::parse(in);
  }
  edit(j);
  std::ofstream(dir / "manifest.json") << j.dump(2);
}

std::string resume_error(const std::string& dir, HybridModel<float>& m, AdamWState<float>* st) {
  try {
    load_checkpoint(dir, m, st);
  } catch (const EngineError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a save switches generations in one step and leaves only the live files", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> m(pat::parse("M*E-"), cfg, 1);
  AdamWState<float> st;
  train_steps(m, st, 0, 1);
  TempDir d;
  save_checkpoint(d.str(), m, &st, 1, 1);
  CHECK(names_in(d.path) == std::set<std::string>{"manifest.json", "model-000001.safetensors", "optimizer-000001.safetensors"});
  train_steps(m, st, 1, 1);
  save_checkpoint(d.str(), m, &st, 2, 1);
  CHECK(names_in(d.path) == std::set<std::string>{"manifest.json", "model-000002.safetensors", "optimizer-000002.safetensors"});
  CHECK(read_manifest(d.str()).generation == 2);
}

TEST_CASE("a failed save leaves the previous checkpoint loadable and no files of its own", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> first(pat::parse("M*E-"), cfg, 1);
  HybridModel<float> second(pat::parse("M*E-"), cfg, 2);
  TempDir d;
  save_checkpoint(d.str(), first, nullptr, 3, 1);
  // The next generation's optimizer file cannot be written (a directory stands in its place),
  // after its model file was: the save must throw and remove that model file again.
  fs::create_directories(d.path / "optimizer-000002.safetensors");
  AdamWState<float> st;
  CHECK_THROWS_AS(save_checkpoint(d.str(), second, &st, 4, 1), EngineError);
  CHECK_FALSE(fs::exists(d.path / "model-000002.safetensors"));
  for (const auto& name : names_in(d.path)) CHECK(name.find(".tmp-") == std::string::npos);
  HybridModel<float> back(pat::parse("M*E-"), cfg, 9);
  CHECK(load_checkpoint(d.str(), back, nullptr).step == 3);
  CHECK(values(back) == values(first));
}

TEST_CASE("checkpoints that cannot be trained from are refused before any value changes", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> dst(pat::parse("M*E-"), cfg, 2);
  const auto before = values(dst);
  auto poisoned = [&](float value) {
    HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
    (*src.parameters().front().value)[1] = value;
    auto d = std::make_unique<TempDir>();
    save_checkpoint(d->str(), src, nullptr, 0, 1);
    return d;
  };
  CHECK_THAT(resume_error(poisoned(std::nanf(""))->str(), dst, nullptr), Catch::Contains("NaN"));
  CHECK_THAT(resume_error(poisoned(INFINITY)->str(), dst, nullptr), Catch::Contains("infinity"));
  CHECK_THAT(resume_error(poisoned(3e38f)->str(), dst, nullptr), Catch::Contains("beyond the bound"));
  {
    HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
    AdamWState<float> st;
    st.step = -4;
    TempDir d;
    save_checkpoint(d.str(), src, &st, 0, 1);
    AdamWState<float> out;
    CHECK_THAT(resume_error(d.str(), dst, &out), Catch::Contains("optimizer step"));
  }
  for (const long long step : {-1LL, 9223372036854775807LL}) {
    TempDir d;
    HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
    save_checkpoint(d.str(), src, nullptr, 0, 1);
    edit_manifest(d.path, [&](nlohmann::json& j) { j["step"] = step; });
    CHECK_THAT(resume_error(d.str(), dst, nullptr), Catch::Contains("outside [0, 2^53]"));
  }
  CHECK(values(dst) == before);
}

TEST_CASE("a manifest naming a non-regular or foreign file is refused", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
  HybridModel<float> dst(pat::parse("M*E-"), cfg, 2);
  TempDir d;
  save_checkpoint(d.str(), src, nullptr, 0, 1);
  const fs::path model = data_file(d.path, "model");
  fs::remove(model);
  fs::create_symlink("/dev/zero", model);  // hashing it would never end
  CHECK_THAT(resume_error(d.str(), dst, nullptr), Catch::Contains("not a regular file"));
  edit_manifest(d.path, [](nlohmann::json& j) { j["files"]["model"]["file"] = "../elsewhere.safetensors"; });
  CHECK_THAT(resume_error(d.str(), dst, nullptr), Catch::Contains("must name a file of the checkpoint folder"));
  HybridModel<float> gpt_like(pat::parse("*-"), cfg, 3);  // a pattern GPT weights can fill
  CHECK_THROWS_WITH(import_gpt(d.str(), gpt_like), Catch::Contains("a directory"));
}

TEST_CASE("format 1 checkpoints (fixed file names) still load", "[engine][checkpoint]") {
  const ModelConfig cfg = small_config();
  HybridModel<float> src(pat::parse("M*E-"), cfg, 1);
  HybridModel<float> dst(pat::parse("M*E-"), cfg, 2);
  TempDir d;
  fs::create_directories(d.path);
  std::vector<std::pair<std::string, const Tensor<float>*>> tensors;
  for (const auto& p : src.parameters()) tensors.emplace_back(p.key, p.value);
  const WrittenFile w = write_safetensors((d.path / "model.safetensors").string(), tensors, {{"format", "hybrid-twin-checkpoint"}});
  const nlohmann::json manifest = {{"format", "hybrid-twin-checkpoint"}, {"format_version", 1}, {"pattern", "M*E-"},
                                   {"config", config_to_json(cfg)}, {"step", 7}, {"seed", 1},
                                   {"files", {{"model.safetensors", {{"bytes", w.bytes}, {"fnv1a64", w.fnv1a64}}}}}};
  std::ofstream(d.path / "manifest.json") << manifest.dump();
  CHECK(load_checkpoint(d.str(), dst, nullptr).step == 7);
  CHECK(values(dst) == values(src));
}
