// Executor comparison helpers (see exec/compare.hpp).
#include "ht/engine/exec/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "ht/engine/error.hpp"
#include "ht/engine/rng.hpp"
#include "ht/schedule/build.hpp"

namespace ht::engine::exec {

std::vector<std::vector<Batch>> random_batches(int ranks, int microbatches, int batch, int seq, int vocab,
                                               std::uint64_t seed) {
  std::vector<std::vector<Batch>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    for (int m = 0; m < microbatches; ++m) {
      Rng rng(seed * 7919 + static_cast<std::uint64_t>(r * 131 + m));
      Batch b{Tensor<int>({batch, seq}), Tensor<int>({batch, seq})};
      for (auto& v : b.tokens.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
      for (auto& v : b.targets.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
      out[static_cast<std::size_t>(r)].push_back(std::move(b));
    }
  return out;
}

schedule::Plan ep_plan(const patterns::ParsedPattern& p, const ModelConfig& cfg, int batch, int seq, int ep,
                       int microbatches, bool overlap, bool delay_wgrad, int dp) {
  schedule::ParallelConfig pc;
  pc.ep = ep;
  pc.dp = dp > 0 ? dp : ep;
  pc.microbatches = microbatches;
  schedule::ScheduleOptions so;
  so.overlap = overlap;
  so.delay_wgrad = delay_wgrad;
  return schedule::build_plan(p, schedule_dims(cfg, batch, seq), pc, so);
}

Owned owned(Executor& e) {
  return {e.ranks(), [&e](int r) { return e.parameters(r); },
          [&e](int r, const std::string& name) { return e.owns(r, name); },
          [&e](int r) { return e.optimizer_state(r); },
          [&e](int r, const AdamWState<float>& s) { e.set_optimizer_state(r, s); }};
}

void gather_model(const Owned& run, HybridModel<float>& model, AdamWState<float>* state) {
  std::map<std::string, ParamRef<float>> into;
  for (auto& p : model.parameters()) into.emplace(p.canonical, p);
  std::set<std::string> done;
  if (state) *state = AdamWState<float>{};
  for (int r = 0; r < run.ranks && done.size() < into.size(); ++r) {  // replicas add nothing
    const AdamWState<float> st = state ? run.optimizer_state(r) : AdamWState<float>{};
    if (state && r == 0) state->step = st.step;
    for (auto& p : run.parameters(r)) {
      if (!run.owns(r, p.canonical) || done.count(p.canonical)) continue;
      const auto it = into.find(p.canonical);
      if (it == into.end() || it->second.value->shape != p.value->shape)
        throw EngineError(ErrorCode::BadConfig,
                          "gather_model: the model has no parameter " + p.canonical + " of its shape");
      *it->second.value = *p.value;
      done.insert(p.canonical);
      if (!state) continue;
      if (const auto m = st.exp_avg.find(p.canonical); m != st.exp_avg.end()) state->exp_avg[p.canonical] = m->second;
      if (const auto v = st.exp_avg_sq.find(p.canonical); v != st.exp_avg_sq.end())
        state->exp_avg_sq[p.canonical] = v->second;
    }
  }
  for (const auto& [name, p] : into)
    if (!done.count(name))
      throw EngineError(ErrorCode::BadConfig,
                        "gather_model: no rank here holds " + name + " (ranks in other processes?)");
}

void scatter_model(const Owned& run, HybridModel<float>& model, const AdamWState<float>* state) {
  std::map<std::string, const Tensor<float>*> from;
  for (auto& p : model.parameters()) from.emplace(p.canonical, p.value);
  std::vector<std::vector<ParamRef<float>>> held(static_cast<std::size_t>(run.ranks));
  for (int r = 0; r < run.ranks; ++r) {
    held[static_cast<std::size_t>(r)] = run.parameters(r);
    for (auto& p : held[static_cast<std::size_t>(r)]) {
      if (!run.owns(r, p.canonical)) continue;
      const auto it = from.find(p.canonical);
      if (it == from.end())
        throw EngineError(ErrorCode::BadCheckpoint, "the checkpoint has no parameter " + p.canonical);
      if (it->second->shape != p.value->shape)
        throw EngineError(ErrorCode::BadCheckpoint, "the checkpoint's " + p.canonical + " has another shape");
    }
  }
  for (int r = 0; r < run.ranks; ++r) {
    for (auto& p : held[static_cast<std::size_t>(r)])
      if (run.owns(r, p.canonical)) *p.value = *from.at(p.canonical);
    run.restore(r, state ? *state : AdamWState<float>{});
  }
}

OwnedDiff compare_owned(const Owned& a, const Owned& b, bool grads) {
  OwnedDiff d;
  std::map<std::string, ParamRef<float>> owner_in_b;
  for (int q = 0; q < b.ranks; ++q)
    for (auto& p : b.parameters(q))
      if (b.owns(q, p.canonical)) owner_in_b.emplace(p.canonical, p);
  for (int r = 0; r < a.ranks; ++r)
    for (auto& p : a.parameters(r)) {
      if (!a.owns(r, p.canonical)) continue;
      const auto it = owner_in_b.find(p.canonical);
      const Tensor<float>& x = grads ? *p.grad : *p.value;
      if (it == owner_in_b.end() || (grads ? *it->second.grad : *it->second.value).shape != x.shape) {
        if (d.missing.empty()) d.missing = p.canonical;
        d.bitwise = false;
        d.max_abs = INFINITY;
        continue;
      }
      const Tensor<float>& y = grads ? *it->second.grad : *it->second.value;
      if (std::memcmp(x.data.data(), y.data.data(), x.size() * sizeof(float)) != 0 && d.bitwise) {
        d.bitwise = false;
        d.first_differing = p.canonical;
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(x[i] - y[i])));
        d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(y[i])));
      }
    }
  return d;
}

}  // namespace ht::engine::exec
