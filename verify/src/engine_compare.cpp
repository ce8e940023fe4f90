// Equivalence oracles over executors (see engine_compare.hpp).
#include "engine_compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ht/engine/exec/compare.hpp"
#include "ht/verify/property.hpp"

namespace ht::verify::detail {

std::vector<std::vector<engine::Batch>> batches_for(const gen::EngineCase& c, int ranks, int microbatches,
                                                    std::uint64_t salt) {
  return engine::exec::random_batches(ranks, microbatches, c.batch, c.seq, c.model.vocab_size, c.data_seed + salt);
}

schedule::Plan plan_for(const patterns::ParsedPattern& p, const gen::EngineCase& c, int ep, int microbatches,
                        bool overlap, bool delay_wgrad) {
  return engine::exec::ep_plan(p, c.model, c.batch, c.seq, ep, microbatches, overlap, delay_wgrad);
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

engine::exec::OwnedDiff compare_owned(engine::exec::Executor& a, engine::exec::Executor& b, bool grads) {
  const auto d = engine::exec::compare_owned(a, b, grads);
  if (!d.missing.empty()) fail("parameter " + d.missing + " has no owner of its shape in the reference run");
  return d;
}

}  // namespace ht::verify::detail
