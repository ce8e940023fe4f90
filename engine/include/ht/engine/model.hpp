// The hybrid model the engine trains: embedding -> logical layers (each one symbol or a
// bracketed group of physical layers, every physical layer a pre-norm residual block) -> final
// norm -> output layer -> cross-entropy, plus MTP depths that share the embedding and the output
// layer (reference sections 2.4 and 5.1). A group is the same math as its members in sequence,
// so a grouped pattern and its flattened form compute the same bits from the same weights.
//
// Shapes: Batch.tokens and Batch.targets (B, T) ids in [0, V); hidden states (B, T, C);
// logits (B, T, V). One microbatch in flight: forward() fills every cache, backward() consumes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ht/engine/branch.hpp"
#include "ht/engine/config.hpp"
#include "ht/engine/layers/cross_entropy.hpp"
#include "ht/engine/layers/rmsnorm.hpp"
#include "ht/engine/tensor.hpp"
#include "ht/patterns/pattern.hpp"

namespace ht::engine {

struct Batch {
  Tensor<int> tokens;   // (B, T)
  Tensor<int> targets;  // (B, T): targets[b, t] is the token after tokens[b, t]
};

// roll(x, -1) along time with the freed last position set to 0 (Megatron's roll_tensor): the
// inputs and targets of each MTP depth are its predecessor's, rolled. (B, T) -> (B, T).
Tensor<int> roll_left(const Tensor<int>& x);

// Every term of the training loss of one forward (all already scaled as they enter the total).
struct LossBreakdown {
  double total = 0;               // lm + sum(mtp) + aux + z: what backward differentiates
  double lm = 0;                  // mean cross-entropy of the main head
  std::vector<double> mtp;        // per depth: mtp_loss_scaling / depths * mean CE over valid tokens
  double aux = 0;                 // sum of MoE load-balancing losses
  double z = 0;                   // sum of MoE z-losses
};

template <class T>
struct ParamRef {
  std::string key;        // checkpoint key under this model's pattern (logical numbering)
  std::string canonical;  // pattern-independent name ("layers.<physical>." for decoder layers)
  Tensor<T>* value;
  Tensor<T>* grad;
};

template <class T>
class HybridModel {
 public:
  // Throws patterns::PatternError (via the pattern library) or EngineError (unsupported symbol,
  // bad dimensions). Parameters are drawn from streams keyed by (seed, canonical layer name),
  // so the same seed gives the same weights for a grouped pattern and its flattened form.
  HybridModel(const patterns::ParsedPattern& pattern, const ModelConfig& cfg, std::uint64_t seed);
  ~HybridModel();
  HybridModel(HybridModel&&) noexcept;
  HybridModel& operator=(HybridModel&&) noexcept;

  LossBreakdown forward(const Batch& batch);
  // Gradients of LossBreakdown::total accumulate (+=) into every ParamRef::grad.
  void backward();
  void zero_grad();

  // Fixed order: embedding, decoder layers by physical index (pre-norm first), final norm,
  // output layer, MTP depths. The same order is the reduction order of the global grad norm.
  std::vector<ParamRef<T>> parameters();
  std::size_t num_parameters();

  const Tensor<T>& logits() const;      // main head, (B, T, V), of the last forward
  const Tensor<T>& mtp_logits(int depth) const;
  const patterns::ParsedPattern& pattern() const;
  const ModelConfig& config() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Physical layers of a pattern that the engine cannot build, as an EngineError message, or ""
// when every symbol is supported. Lets callers fail before allocating anything.
std::string unsupported_symbols(const patterns::ParsedPattern& pattern);

}  // namespace ht::engine
