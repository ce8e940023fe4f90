// Equivalence oracles over executors (see engine_compare.hpp).
#include "engine_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ht/engine/rng.hpp"
#include "ht/schedule/build.hpp"
#include "ht/verify/property.hpp"

namespace ht::verify::detail {

std::vector<std::vector<engine::Batch>> batches_for(const gen::EngineCase& c, int ranks, int microbatches,
                                                    std::uint64_t salt) {
  std::vector<std::vector<engine::Batch>> out(static_cast<std::size_t>(ranks));
  const int vocab = c.model.vocab_size;
  for (int r = 0; r < ranks; ++r)
    for (int m = 0; m < microbatches; ++m) {
      engine::Rng rng((c.data_seed + salt) * 7919 + static_cast<std::uint64_t>(r * 131 + m));
      engine::Batch b{engine::Tensor<int>({c.batch, c.seq}), engine::Tensor<int>({c.batch, c.seq})};
      for (auto& v : b.tokens.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
      for (auto& v : b.targets.data) v = static_cast<int>(rng.uniform() * vocab) % vocab;
      out[static_cast<std::size_t>(r)].push_back(std::move(b));
    }
  return out;
}

schedule::Plan plan_for(const patterns::ParsedPattern& p, const gen::EngineCase& c, int ep, int microbatches,
                        bool overlap, bool delay_wgrad) {
  schedule::ParallelConfig pc;
  pc.ep = ep;
  pc.dp = ep;
  pc.microbatches = microbatches;
  schedule::ScheduleOptions so;
  so.overlap = overlap;
  so.delay_wgrad = delay_wgrad;
  return schedule::build_plan(p, engine::exec::schedule_dims(c.model, c.batch, c.seq), pc, so);
}

std::map<std::string, engine::Tensor<float>> tensors_of(engine::exec::Executor& ex, bool grads) {
  std::map<std::string, engine::Tensor<float>> out;
  for (int r = 0; r < ex.ranks(); ++r)
    for (auto& p : ex.parameters(r)) out["r" + std::to_string(r) + ":" + p.canonical] = grads ? *p.grad : *p.value;
  return out;
}

namespace {
bool same_bits(const engine::Tensor<float>& a, const engine::Tensor<float>& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.size() * sizeof(float)) == 0;
}
}  // namespace

std::vector<std::string> differing(const std::map<std::string, engine::Tensor<float>>& a,
                                   const std::map<std::string, engine::Tensor<float>>& b) {
  std::vector<std::string> diff;
  for (const auto& [k, v] : a)
    if (!b.count(k) || !same_bits(v, b.at(k))) diff.push_back(k);
  for (const auto& [k, v] : b)
    if (!a.count(k)) diff.push_back(k);
  return diff;
}

void expect_same_losses(const engine::exec::StepResult& a, const engine::exec::StepResult& b, const std::string& what) {
  if (a.loss.size() != b.loss.size()) fail(what + ": different numbers of ranks");
  for (std::size_t r = 0; r < a.loss.size(); ++r)
    for (std::size_t m = 0; m < a.loss[r].size(); ++m) {
      const double x = a.loss[r][m], y = b.loss[r].at(m);
      if (std::memcmp(&x, &y, sizeof x) != 0)
        fail(what + ": loss of rank " + std::to_string(r) + " microbatch " + std::to_string(m) + " differs (" +
             std::to_string(x) + " vs " + std::to_string(y) + ")");
    }
}

void expect_same_tensors(engine::exec::Executor& a, engine::exec::Executor& b, bool grads, const std::string& what) {
  const auto diff = differing(tensors_of(a, grads), tensors_of(b, grads));
  if (!diff.empty())
    fail(what + ": " + std::to_string(diff.size()) + (grads ? " gradients" : " parameters") + " differ, first " +
         diff.front());
}

OwnedDiff compare_owned(engine::exec::Executor& a, engine::exec::Executor& b, bool grads) {
  OwnedDiff d;
  std::map<std::string, engine::ParamRef<float>> owner_in_b;
  for (int q = 0; q < b.ranks(); ++q)
    for (auto& p : b.parameters(q))
      if (b.owns(q, p.canonical)) owner_in_b.emplace(p.canonical, p);
  for (int r = 0; r < a.ranks(); ++r)
    for (auto& p : a.parameters(r)) {
      if (!a.owns(r, p.canonical)) continue;
      const auto it = owner_in_b.find(p.canonical);
      if (it == owner_in_b.end()) fail("parameter " + p.canonical + " has no owner in the reference run");
      const auto& x = grads ? *p.grad : *p.value;
      const auto& y = grads ? *it->second.grad : *it->second.value;
      if (x.shape != y.shape) fail("parameter " + p.canonical + " has another shape in the reference run");
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

}  // namespace ht::verify::detail
