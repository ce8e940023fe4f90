// The executor's parameters: each rank's in model order, which rank owns which (DP column 0 and the
// experts' EP ranks), the optimizer step with its one global-norm order, and checkpoints.
#include <algorithm>
#include <cmath>

#include "ht/engine/error.hpp"
#include "ht/engine/layers/table.hpp"
#include "ht/engine/safetensors.hpp"
#include "state.hpp"

namespace ht::engine::exec {

std::vector<ParamEntry> list_params(RankModel& m) {
  std::vector<ParamEntry> out;
  const int n_layers = static_cast<int>(m.layers.size());
  if (m.first)
    out.push_back({"embedding.word_embeddings.weight", "embedding.word_embeddings.weight", &m.wte, &m.wte_g, -1, -1});
  auto add_block = [&](Block& b, int order) {
    const std::string norm = layers::prenorm_name(b.symbol);
    out.push_back({b.key_prefix + norm, b.canonical_prefix + norm, &b.norm_w, &b.norm_g, -1, order});
    auto add = [&](const std::string& name, Tf& v, Tf& g) {
      out.push_back({b.key_prefix + name, b.canonical_prefix + name, &v, &g, expert_index(name), order});
    };
    if (b.member) b.member->for_each_param(add);
    if (b.moe) b.moe->for_each_param(add);
  };
  for (int l = 0; l < n_layers; ++l)
    for (auto& b : m.layers[static_cast<std::size_t>(l)].blocks) add_block(b, l);
  if (m.last) {
    out.push_back({m.final_norm_key, "decoder.final_norm.weight", &m.final_norm, &m.final_norm_g, -1, n_layers});
    out.push_back({"output_layer.weight", "output_layer.weight", &m.out_w, &m.out_w_g, -1, n_layers + 1});
  }
  // MTP depths last, in HybridModel's order; their keys are their canonical names.
  for (std::size_t d = 0; d < m.mtp.size(); ++d) {
    MtpDepth& md = m.mtp[d];
    const int order = n_layers + 2 + static_cast<int>(d);
    auto add = [&](const std::string& name, Tf& v, Tf& g, int expert) {
      out.push_back({name, name, &v, &g, expert, order});
    };
    add(md.prefix + "enorm.weight", md.enorm, md.enorm_g, -1);
    add(md.prefix + "hnorm.weight", md.hnorm, md.hnorm_g, -1);
    add(md.prefix + "eh_proj.weight", md.eh_proj, md.eh_proj_g, -1);
    for (auto& b : md.layer.blocks) add_block(b, order);
    add(md.prefix + "final_layernorm.weight", md.final_norm, md.final_norm_g, -1);
  }
  return out;
}

// The whole model as DP column d holds it (rank (s, d) of every stage s), in HybridModel's
// parameter order: the order of every reduction over parameters (the global gradient norm) and
// of the checkpoint, whatever the pipeline split.
std::vector<std::pair<int, ParamEntry>> model_column(Executor::Impl& im, int d) {
  std::vector<std::pair<int, ParamEntry>> out;
  for (int s = 0; s < im.plan.pp; ++s) {
    const int r = im.rank_of(s, d);
    for (auto& e : list_params(im.models[static_cast<std::size_t>(r)])) out.emplace_back(r, std::move(e));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.second.order < b.second.order; });
  return out;
}

namespace {

// Every parameter of the model once, from the rank that owns it, in one fixed order whatever the
// pipeline split: DP column after column, each in the model's parameter order; non-expert
// parameters (the same on every DP rank) from column 0, experts from their owners in the first EP
// group (DP > EP: the other groups' replicas are the same after the all-reduce). The order of the
// optimizer's norm and of the checkpoint.
std::vector<std::pair<int, ParamEntry>> model_once(const Executor& ex, Executor::Impl& im) {
  std::vector<std::pair<int, ParamEntry>> out;
  for (int d = 0; d < im.plan.dp; ++d)
    for (auto& [r, e] : model_column(im, d))
      if (ex.owns(r, e.canonical) && (e.expert >= 0 ? d < im.plan.ep : d == 0)) out.emplace_back(r, std::move(e));
  return out;
}

}  // namespace

std::vector<ParamRef<float>> Executor::Impl::owned(Executor& ex, int rank) {
  std::vector<ParamRef<float>> out;
  for (auto& p : ex.parameters(rank))
    if (ex.owns(rank, p.canonical)) out.push_back(p);
  return out;
}

double Executor::optimizer_step(const AdamWConfig& cfg) {
  auto& im = *impl_;
  // One sum in model_once's order (non-expert gradients are identical on every DP rank after the
  // all-reduce).
  double ss = 0;
  for (auto& [r, e] : model_once(*this, im))
    for (float g : e.grad->data) ss += static_cast<double>(g) * static_cast<double>(g);
  const double norm = std::sqrt(ss);
  const float clip = (cfg.clip_norm > 0 && norm > cfg.clip_norm) ? static_cast<float>(cfg.clip_norm / norm) : 1.0f;
  AdamWConfig no_clip = cfg;
  no_clip.clip_norm = 0;
  for (int r = 0; r < im.nranks; ++r) {
    auto params = Impl::owned(*this, r);
    if (clip != 1.0f)
      for (auto& p : params)
        for (auto& g : p.grad->data) g *= clip;
    adamw_step(no_clip, im.adam[static_cast<std::size_t>(r)], params);
  }
  return norm;
}

std::int64_t Executor::optimizer_steps() const { return impl_->adam.at(0).step; }

AdamWState<float> Executor::optimizer_state(int rank) const { return impl_->adam.at(static_cast<std::size_t>(rank)); }

void Executor::set_optimizer_state(int rank, AdamWState<float> state) {
  for (auto* moments : {&state.exp_avg, &state.exp_avg_sq})  // keep what this rank owns
    std::erase_if(*moments, [&](const auto& kv) { return !owns(rank, kv.first); });
  impl_->adam.at(static_cast<std::size_t>(rank)) = std::move(state);
}

void Executor::save(const std::string& path) const {
  auto& im = *impl_;
  std::vector<std::pair<std::string, const Tf*>> tensors;
  for (auto& [r, p] : model_once(*this, im)) {  // each tensor from its owner, once
    tensors.emplace_back("param/" + p.canonical, p.value);
    auto& st = im.adam[static_cast<std::size_t>(r)];
    if (auto it = st.exp_avg.find(p.canonical); it != st.exp_avg.end())
      tensors.emplace_back("exp_avg/" + p.canonical, &it->second);
    if (auto it = st.exp_avg_sq.find(p.canonical); it != st.exp_avg_sq.end())
      tensors.emplace_back("exp_avg_sq/" + p.canonical, &it->second);
  }
  write_safetensors(path, tensors,
                    {{"format", "hybrid-twin-executor-checkpoint"},
                     {"version", "1"},
                     {"pattern", im.pattern.text},
                     {"optimizer_step", std::to_string(im.adam.at(0).step)}});
}

void Executor::load(const std::string& path) {
  auto& im = *impl_;
  SafetensorsFile f = read_safetensors(path);
  auto bad = [&](const std::string& why) { throw EngineError(ErrorCode::BadCheckpoint, path + ": " + why); };
  if (f.metadata["format"] != "hybrid-twin-executor-checkpoint") bad("not an executor checkpoint");
  std::int64_t step = 0;
  try {
    step = std::stoll(f.metadata.at("optimizer_step"));
  } catch (const std::exception&) {
    bad("missing or malformed optimizer_step");
  }
  // Validate everything before changing anything.
  std::size_t expected = 0;
  for (auto& owned_entry : model_once(*this, im)) {
    const ParamEntry& p = owned_entry.second;
    auto it = f.tensors.find("param/" + p.canonical);
    if (it == f.tensors.end()) bad("missing parameter " + p.canonical);
    if (it->second.shape != p.value->shape) bad("parameter " + p.canonical + " has the wrong shape");
    ++expected;
    for (const char* kind : {"exp_avg/", "exp_avg_sq/"}) {
      auto m = f.tensors.find(kind + p.canonical);
      if (step > 0 && m == f.tensors.end()) bad(std::string("missing optimizer state ") + kind + p.canonical);
      if (m != f.tensors.end()) {
        if (m->second.shape != p.value->shape)
          bad(std::string("optimizer state ") + kind + p.canonical + " has the wrong shape");
        ++expected;
      }
    }
  }
  if (expected != f.tensors.size()) bad("holds tensors this model does not have");
  for (int r = 0; r < im.nranks; ++r) {
    auto& st = im.adam[static_cast<std::size_t>(r)];
    st = AdamWState<float>{};
    st.step = step;
    for (auto& p : parameters(r)) {
      if (!owns(r, p.canonical)) continue;  // another EP rank's expert: not held here
      *p.value = f.tensors.at("param/" + p.canonical);
      if (auto m = f.tensors.find("exp_avg/" + p.canonical); m != f.tensors.end()) st.exp_avg[p.canonical] = m->second;
      if (auto m = f.tensors.find("exp_avg_sq/" + p.canonical); m != f.tensors.end())
        st.exp_avg_sq[p.canonical] = m->second;
    }
  }
}

std::vector<ParamRef<float>> Executor::parameters(int rank) {
  std::vector<ParamRef<float>> out;
  for (auto& e : list_params(impl_->models.at(static_cast<std::size_t>(rank))))
    out.push_back({e.key, e.canonical, e.value, e.grad});
  return out;
}

bool Executor::owns(int rank, const std::string& canonical) const {
  const auto& im = *impl_;
  const RankModel& m = im.models.at(static_cast<std::size_t>(rank));
  if (canonical == "embedding.word_embeddings.weight") return m.first;
  if (canonical == "decoder.final_norm.weight" || canonical == "output_layer.weight") return m.last;
  // "mtp.layers.<depth>.<...>": held by the last stage. "layers.<physical>.<...>": held when
  // the logical layer of that physical layer is.
  const std::string mtp_head = "mtp.layers.", head = "layers.";
  if (canonical.rfind(mtp_head, 0) == 0) {
    if (!m.last || m.mtp.empty()) return false;
  } else {
    if (canonical.rfind(head, 0) != 0) return false;
    int phys = 0;
    try {
      phys = std::stoi(canonical.substr(head.size()));
    } catch (const std::exception&) {
      return false;
    }
    bool held = false;
    for (const auto& layer : m.layers)
      for (const auto& b : layer.blocks) held |= b.physical == phys;
    if (!held) return false;
  }
  const int expert = expert_index(canonical);
  if (expert < 0 || im.local_experts == 0) return true;
  return expert / im.local_experts == im.at(rank).ep_rank;
}

}  // namespace ht::engine::exec
