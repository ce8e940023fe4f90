// Data-parallel training on one device: R replicas of the model (ranks sharing the device), each
// forward and backward on its own batch, the gradients summed over the ranks in rank order -- the
// executor's all-reduce (communicator.hpp: x_0 + x_1 + ... + x_{R-1}) -- by a kernel that reads
// every rank's buffer (the device-side transport: all ranks live in one address space), then
// AdamW on every rank. Loss weights are the executor's global ones, so on the host emulation a
// pattern without SwiGLU layers gives the CPU executor's losses, gradients and weights (EP = DP = R
// without experts to shard) bit for bit; with MoE layers every rank holds every expert (replicated,
// summed like the rest), which is data parallelism without expert parallelism.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ht/engine/cuda/dev/model.hpp"

namespace ht::engine::dev {

// The ranks' copies of one gradient (up to 8 ranks): every copy becomes x_0 + x_1 + ... in rank
// order, one thread per element.
struct RankBuffers {
  float* g[8];
};
template <class D>
void sum_over_ranks(RankBuffers ptrs, int n, long size) {
  D::launch(size, [=] HT_HD(long i) {
    float acc = ptrs.g[0][i];
    for (int r = 1; r < n; ++r) acc += ptrs.g[r][i];
    for (int r = 0; r < n; ++r) ptrs.g[r][i] = acc;
  });
}

template <class D>
class DevDataParallel {
 public:
  static constexpr int kMaxRanks = 8;  // RankBuffers

  DevDataParallel(const patterns::ParsedPattern& p, const ModelConfig& cfg, std::uint64_t seed, int ranks) {
    if (ranks < 1 || ranks > kMaxRanks)
      throw EngineError(ErrorCode::BadConfig, "data-parallel ranks on one device: 1 to " + std::to_string(kMaxRanks) +
                                                  ", got " + std::to_string(ranks));
    for (int r = 0; r < ranks; ++r) {
      hosts_.push_back(std::make_unique<HybridModel<float>>(p, cfg, seed));
      models_.push_back(std::make_unique<DevModel<D, float>>(*hosts_.back()));
      models_.back()->set_data_parallel_ranks(ranks);
    }
    states_.resize(static_cast<std::size_t>(ranks));
  }
  int ranks() const { return static_cast<int>(models_.size()); }

  // One forward and backward per rank (batches[r], all of one shape), the gradient sum, and no
  // update: per-rank loss totals (their sum is the step's loss).
  std::vector<LossBreakdown> forward_backward(const std::vector<Batch>& batches) {
    if (static_cast<int>(batches.size()) != ranks())
      throw EngineError(ErrorCode::BadInput, "need one batch per data-parallel rank (" + std::to_string(ranks()) + ")");
    for (const auto& b : batches)
      if (b.tokens.shape != batches.front().tokens.shape)
        throw EngineError(ErrorCode::BadInput, "data-parallel ranks need batches of one shape");
    std::vector<LossBreakdown> losses;
    for (std::size_t r = 0; r < models_.size(); ++r) {
      models_[r]->zero_grad();
      losses.push_back(models_[r]->forward(batches[r]));
      models_[r]->backward();
    }
    all_reduce_grads();
    return losses;
  }
  // AdamW on every rank (identical gradients and weights, so identical updates); the norm.
  double adamw_step(const AdamWConfig& cfg) {
    double norm = 0;
    for (std::size_t r = 0; r < models_.size(); ++r) norm = models_[r]->adamw_step(cfg, states_[r]);
    return norm;
  }
  // Rank r's weights (and gradients) into its host model.
  HybridModel<float>& host(int r) {
    models_.at(static_cast<std::size_t>(r))->download_params();
    models_.at(static_cast<std::size_t>(r))->download_grads();
    return *hosts_.at(static_cast<std::size_t>(r));
  }

 private:
  void all_reduce_grads() {
    const int n = ranks();
    if (n == 1) return;
    auto& first = models_.front()->params();
    for (std::size_t p = 0; p < first.count(); ++p) {
      RankBuffers ptrs{};
      for (int r = 0; r < n; ++r) ptrs.g[r] = models_[static_cast<std::size_t>(r)]->params().grad_at(p);
      sum_over_ranks<D>(ptrs, n, static_cast<long>(first.size_at(p)));
    }
  }

  std::vector<std::unique_ptr<HybridModel<float>>> hosts_;
  std::vector<std::unique_ptr<DevModel<D, float>>> models_;
  std::vector<AdamWState<float>> states_;
};

// DevDataParallel<D> behind the plain DataParallelModel interface (device_model.hpp).
template <class D>
class DataParallelOn final : public cuda::DataParallelModel {
 public:
  DataParallelOn(const patterns::ParsedPattern& p, const ModelConfig& cfg, std::uint64_t seed, int ranks, std::string name)
      : dp_(p, cfg, seed, ranks), name_(std::move(name)) {}
  std::string device() const override { return name_; }
  int ranks() const override { return dp_.ranks(); }
  std::vector<LossBreakdown> forward_backward(const std::vector<Batch>& batches) override {
    return dp_.forward_backward(batches);
  }
  double adamw_step(const AdamWConfig& cfg) override { return dp_.adamw_step(cfg); }
  HybridModel<float>& host(int rank) override { return dp_.host(rank); }

 private:
  DevDataParallel<D> dp_;
  std::string name_;
};

}  // namespace ht::engine::dev
