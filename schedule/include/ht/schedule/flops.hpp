// Model FLOPs of a training step by Megatron's accounting (megatron-parallel.md 7): three times
// the forward FLOPs of the layers' GEMMs and attention scores (causal), plus the logits, over the
// tokens of the global batch; recomputation, routers, norms and communication are not counted.
// Megatron's hybrid_flops reads only 'M G * - E' and hard-codes Mamba's inner size to 2 x hidden;
// here every symbol counts with the model's own sizes ('+' and the sparse attentions by the GPT
// path's MLA term, 'W' and 'D' over their key window). MFU = these FLOPs / (step time x GPUs x
// the GPU's dense BF16 peak).
#pragma once

#include "ht/patterns/pattern.hpp"
#include "ht/schedule/config.hpp"

namespace ht::schedule {

// FLOPs of one forward of one layer symbol over `tokens` tokens of sequences of the model's
// seq_len (the MTP depths' symbols count like the main pattern's).
double forward_flops(char symbol, const ModelDims& dims, double tokens);
// Model FLOPs of one step of `global_batch` sequences (forward + backward = 3 x forward).
double model_flops_per_step(const patterns::ParsedPattern& pattern, const ModelDims& dims, double global_batch);

}  // namespace ht::schedule
