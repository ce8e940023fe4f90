// Per-GPU memory (see memory.hpp).
#include "ht/schedule/memory.hpp"

#include "ht/schedule/pipeline_order.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "ht/schedule/costs.hpp"
#include "ht/schedule/layer_shape.hpp"
#include "ht/schedule/layout.hpp"
#include "ht/schedule/params.hpp"

namespace ht::schedule {
namespace {

// Elements per owned token one layer symbol keeps (section 8.2), and the part selective
// recomputation removes; `bytes` collects fp32 items (counted in bytes).
struct Kept {
  double elements = 0;
  double fp32_bytes = 0;
};

// Per owned token, what an attention layer's core reads and writes: its queries, its keys and
// values (of every KV head the rank holds: max(groups, tp) under TP; MLA: one per head) and its
// output.
struct AttnSizes {
  double q = 0, kv = 0, out = 0;
};
AttnSizes attn_sizes(char c, const ModelDims& d, double t) {
  const double a = d.num_heads;
  if (c == '*' || c == 'W') return {a * d.head_dim, 2 * d.head_dim * std::max(double(d.num_kv_heads), t), a * d.head_dim};
  const double qk = double(d.mla_qk_dim()) + d.mla_rope_head_dim, v = d.mla_v_dim();  // MLA
  return {a * qk, a * qk + a * v, a * v};
}

Kept symbol_kept(char c, const ModelDims& d, const ParallelConfig& cfg) {
  const double h = d.hidden, t = cfg.tp;
  const Recompute& rc = cfg.recompute;
  Kept k;
  switch (c) {
    case '*':
    case 'W': {
      const AttnSizes at = attn_sizes(c, d, t);
      k.elements = 2 * h + at.q + at.kv + at.out + d.attn_output_gate * at.out;
      k.fp32_bytes = 4.0 * d.num_heads;  // softmax statistics
      break;
    }
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      const double a = d.num_heads, qk = double(d.mla_qk_dim()) + d.mla_rope_head_dim, v = d.mla_v_dim();
      const AttnSizes at = attn_sizes(c, d, t);
      k.elements = 2 * h + 2.0 * d.q_lora_rank + 2.0 * d.kv_lora_rank + at.q + at.kv + at.out;
      k.fp32_bytes = 4 * a;
      if (rc.has(kRecomputeMlaUpProj)) k.elements -= 2 * a * qk + a * v;
      if (rc.has(kRecomputeLayernorm)) k.elements -= h;
      break;
    }
    case 'M': {
      const double di = double(d.mamba_num_heads) * d.mamba_head_dim;
      const double groups = double(d.mamba_groups) / t;
      const double r = cfg.cp > 1 && groups < cfg.cp ? cfg.cp / groups : 1.0;
      k.elements = 2 * h + (2 * di + 2 * r * d.mamba_groups * d.mamba_state + d.mamba_num_heads) + 3 * di;
      break;
    }
    case 'G': {
      const double qk = double(d.gdn_qk_heads()) * d.gdn_qk_head_dim(), v = double(d.gdn_num_heads) * d.gdn_head_dim;
      const double hv = d.gdn_num_heads;
      k.elements = 2 * h + (2 * qk + 2 * v + 2 * hv) + (2 * qk + v) + 2 * hv * d.gdn_qk_head_dim() + v + 3 * v;
      k.fp32_bytes = 8 * hv;
      break;
    }
    case '-': {
      const double f = d.ffn_hidden;
      k.elements = 2 * h + (d.ffn_matrices() - 1) * f + f;
      if (rc.has(kRecomputeMlp)) k.elements = h;
      break;
    }
    case 'E': {
      const double x = d.ffn_matrices(), kk = d.top_k, te = cfg.etp;
      k.elements = 2 * h + kk * te * d.moe_width() + kk * d.moe_ffn_hidden * x + x * d.shared_expert_ffn;
      if (d.moe_latent_size > 0) k.elements += 2.0 * d.moe_latent_size;  // the latent in and out
      k.fp32_bytes = 9.0 * d.num_experts + 4 * kk * te;
      if (rc.has(kRecomputeMoeAct)) k.elements -= kk * d.moe_ffn_hidden;
      if (rc.has(kRecomputeSharedExperts)) k.elements -= x * d.shared_expert_ffn;
      if (rc.has(kRecomputeLayernorm)) k.elements -= h;
      if (rc.has(kRecomputeMoe)) k = {h, 0};
      break;
    }
    default: break;
  }
  return k;
}

}  // namespace

OffloadSplit offloaded_elements(char c, const ModelDims& d, const ParallelConfig& cfg) {
  const Offload& o = cfg.offload;
  OffloadSplit out;
  if (!o.any() || cfg.recompute.full) return out;
  const double h = d.hidden, t = cfg.tp;
  switch (c) {
    case '*':
    case 'W':
    case '+':
    case 'D':
    case 'C':
    case 'H': {
      const AttnSizes at = attn_sizes(c, d, t);
      out.pre = (o.has(kOffloadAttnNorm) ? h : 0) + (o.has(kOffloadQkvLinear) ? h : 0) +
                (o.has(kOffloadCoreAttn) ? at.q + at.kv : 0) + (o.has(kOffloadAttnProj) ? at.out : 0);
      break;
    }
    case '-': out.mlp = o.has(kOffloadMlpNorm) ? h : 0; break;
    case 'E': {
      const double x = d.ffn_matrices(), kk = d.top_k, te = cfg.etp;
      out.pre = o.has(kOffloadMlpNorm) ? h : 0;
      out.mlp = (o.has(kOffloadExpertFc1) ? kk * te * d.moe_width() : 0) +
                (o.has(kOffloadMoeAct) ? kk * (x - 1) * d.moe_ffn_hidden : 0);
      break;
    }
    default: break;
  }
  // Never more than the symbol keeps (recomputed modules keep less).
  const double kept = symbol_kept(c, d, cfg).elements;
  if (out.total() > kept) {
    const double scale = kept / out.total();
    out.pre *= scale;
    out.mlp *= scale;
  }
  return out;
}

namespace {

// Bytes of the output layer and loss (final norm input, output-layer input, fp32 softmax of the
// vocabulary shard) for one microbatch, per prediction head.
double output_bytes(const ModelDims& d, const ParallelConfig& cfg) {
  const double owned = owned_tokens(d, shard_of(cfg));
  return owned * (2.0 * d.hidden * d.bytes_per_element + 4.0 * d.vocab);
}

// Token ids of a microbatch on the first stage (int64, every TP rank holds them).
double embedding_bytes(const ModelDims& d, const ParallelConfig& cfg) {
  return 8.0 * shard_tokens(d, shard_of(cfg));
}

// Which activations a node belongs to: its layer, or the embedding (-1) / output (-2) of the chunk.
int activation_key(const Node& n) { return n.layer >= 0 ? n.layer : n.slot == Slot::PostProcess ? -2 : -1; }

}  // namespace

double layer_activation_bytes(const std::string& symbols, bool mtp, const ModelDims& d, const ParallelConfig& cfg,
                              double* working) {
  const double owned = owned_tokens(d, shard_of(cfg)), beta = d.bytes_per_element;
  ParallelConfig plain = cfg;
  plain.recompute = {};
  double kept = 0, full = 0;
  for (char c : symbols) {
    const Kept k = symbol_kept(c, d, cfg), all = symbol_kept(c, d, plain);
    // Offloaded activations: off the GPU between forward and backward; while the layer's backward
    // runs, the next layer's come back beside its own (reloaded one layer ahead).
    const double off = offloaded_elements(c, d, cfg).total() * beta;
    kept += k.elements * beta + k.fp32_bytes - off;
    full += all.elements * beta + all.fp32_bytes + off;
  }
  if (mtp) {  // enorm/hnorm in and out, the eh_proj input (2h); its output head is on post_process
    kept += 6.0 * d.hidden * beta;
    full += 6.0 * d.hidden * beta;
  }
  kept *= owned;
  full *= owned;
  if (cfg.recompute.full) kept = owned * d.hidden * beta;  // only the layer's input checkpoint
  if (working) *working = full;
  return kept;
}

int saturated_microbatches(const ParallelConfig& c, bool overlap) {
  if (c.pp == 1) return std::min(c.microbatches, 4);
  ParallelConfig one = c;
  one.microbatches = 1 << 20;  // uncapped warm-up
  const int chunks = warmup_microbatches(one, 0, overlap) + 2 * c.model_chunks();
  const int per_group = c.pp * c.model_chunks();  // chunks of one group of pp microbatches
  const int groups = (chunks + per_group - 1) / per_group;
  return std::min(c.microbatches, groups * c.pp);
}

namespace {

// Parameters each pipeline rank holds (dense, expert) and the activation bytes of each of its
// layers (kept, working), by the builder's split.
struct StageContents {
  std::map<std::tuple<int, int, int, bool>, std::pair<double, double>> layer_bytes;  // (pp, vp, layer, mtp)
  // Uniform recompute units of N > 1 layers: (pp, vp, layer) -> the unit's layers.
  std::map<std::tuple<int, int, int>, std::vector<int>> unit_of;
  std::vector<double> dense, expert;
  std::vector<double> largest_unit;  // a rank's parameters of its largest layer, embedding or output
};

StageContents stage_contents(const patterns::ParsedPattern& pattern, const ModelDims& d, const ParallelConfig& cfg,
                             const MemoryModel& model) {
  StageContents sc;
  auto& layer_bytes = sc.layer_bytes;
  auto& dense = sc.dense;
  auto& expert = sc.expert;
  dense.assign(static_cast<std::size_t>(cfg.pp), 0);
  expert.assign(static_cast<std::size_t>(cfg.pp), 0);
  sc.largest_unit.assign(static_cast<std::size_t>(cfg.pp), 0);
  const double vocab_params = double(d.vocab) * d.hidden / cfg.tp;
  auto add_layer = [&](int pp, int vp, int index, bool mtp, const std::string& symbols, bool weights, bool full,
                       bool keeps_input = true) {
    double working = 0;
    ParallelConfig layer_cfg = cfg;  // the block method recomputes some layers of a chunk only
    layer_cfg.recompute.full = full;
    const double kept = model.layer(symbols, mtp, layer_cfg, &working);
    // Inside a uniform unit only its first layer's input is kept.
    layer_bytes[{pp, vp, index, mtp}] = {keeps_input ? kept : 0.0, working};
    if (!weights) return;
    const RankLayerParams p = rank_layer_params(symbols, mtp, d, cfg);
    dense[static_cast<std::size_t>(pp)] += p.dense;
    expert[static_cast<std::size_t>(pp)] += p.expert;
    double& largest = sc.largest_unit[static_cast<std::size_t>(pp)];
    largest = std::max(largest, p.dense + p.expert);
  };
  int last_pp = 0, last_vp = 0;
  for (const patterns::StageSlice& stage : split_stages(pattern, cfg)) {
    const int unit = cfg.recompute.full && cfg.recompute.block_layers < 0 ? std::max(1, cfg.recompute.uniform_layers) : 1;
    for (std::size_t i = 0; i < stage.items.size(); ++i) {
      const int index = static_cast<int>(i);
      add_layer(stage.pp_rank, stage.vp_stage, stage.logical_offset + index, false, stage.items[i].symbols, true,
                cfg.recompute.full_at(index, false), index % unit == 0);
      if (unit > 1) {
        const int first = index / unit * unit, end = std::min<int>(first + unit, static_cast<int>(stage.items.size()));
        auto& members = sc.unit_of[{stage.pp_rank, stage.vp_stage, stage.logical_offset + index}];
        for (int m = first; m < end; ++m) members.push_back(stage.logical_offset + m);
      }
    }
    if (stage.vp_stage > last_vp || (stage.vp_stage == last_vp && stage.pp_rank >= last_pp))
      last_pp = stage.pp_rank, last_vp = stage.vp_stage;
  }
  const int weight_sets = d.mtp_shared_weights && pattern.mtp_depths > 0 ? 1 : pattern.mtp_depths;
  for (int depth = 0; depth < pattern.mtp_depths; ++depth)  // shared MTP weights count once
    add_layer(last_pp, last_vp, depth, true, pattern.mtp, depth < weight_sets, cfg.recompute.full_at(0, true));
  dense.front() += vocab_params;  // the embedding on the first stage
  sc.largest_unit.front() = std::max(sc.largest_unit.front(), vocab_params);
  const bool own_output = !d.tied_embeddings || cfg.pp > 1;
  dense[static_cast<std::size_t>(last_pp)] += (own_output ? vocab_params : 0.0) + d.hidden;
  if (own_output)
    sc.largest_unit[static_cast<std::size_t>(last_pp)] = std::max(sc.largest_unit[static_cast<std::size_t>(last_pp)], vocab_params);
  return sc;
}

// Weights, gradients and optimizer state of pipeline rank pp (megatron-parallel.md 8.1).
void state_bytes(const StageContents& sc, const ParallelConfig& cfg, const MemoryModel& model, std::size_t pp,
                 double& weights, double& gradients, double& optimizer) {
  const bool megatron = cfg.optimizer.sync == GradSync::Megatron;
  const bool sharded = megatron && (cfg.optimizer.distributed || cfg.optimizer.fsdp);
  const double dense_d = sharded ? double(cfg.dp) * cfg.cp : 1.0;
  const double expert_d = sharded ? double(cfg.edp()) : 1.0;
  // --grad-reduce-in-bf16: Megatron's gradient buffers are bf16 (the engine's model gives its own).
  const double weight_bytes = model.weight_bytes,
               gradient_bytes = cfg.optimizer.grad_reduce_bf16 ? std::min(model.gradient_bytes, 2.0)
                                                                : model.gradient_bytes;
  optimizer = model.optimizer_bytes * (sc.dense[pp] / dense_d + sc.expert[pp] / expert_d);
  if (megatron && cfg.optimizer.fsdp) {
    // Megatron-FSDP: the rank's shard of the weights and gradients, plus the units in flight: the
    // one computing and the next one prefetched (weights) and the one being reduced (gradients).
    const double shard = sc.dense[pp] / dense_d + sc.expert[pp] / expert_d;
    weights = weight_bytes * (shard + 2 * sc.largest_unit[pp]);
    gradients = gradient_bytes * (shard + sc.largest_unit[pp]);
    return;
  }
  weights = weight_bytes * (sc.dense[pp] + sc.expert[pp]);
  gradients = gradient_bytes * (sc.dense[pp] + sc.expert[pp]);
}

}  // namespace

MemoryModel megatron_memory(const ModelDims& d, Precision precision) {
  MemoryModel m;
  m.weight_bytes = precision == Precision::Bf16 ? 2 : 3;
  m.layer = [d](const std::string& symbols, bool mtp, const ParallelConfig& cfg, double* working) {
    return layer_activation_bytes(symbols, mtp, d, cfg, working);
  };
  m.output = [d](const ParallelConfig& cfg) { return output_bytes(d, cfg); };
  m.embedding = [d](const ParallelConfig& cfg) { return embedding_bytes(d, cfg); };
  return m;
}

double state_memory(const patterns::ParsedPattern& pattern, const ModelDims& d, const ParallelConfig& cfg,
                    Precision precision) {
  const MemoryModel model = megatron_memory(d, precision);
  const StageContents sc = stage_contents(pattern, d, cfg, model);
  double most = 0;
  for (std::size_t pp = 0; pp < sc.dense.size(); ++pp) {
    double w = 0, g = 0, o = 0;
    state_bytes(sc, cfg, model, pp, w, g, o);
    most = std::max(most, w + g + o);
  }
  return most;
}

MemoryBreakdown peak_memory(const patterns::ParsedPattern& pattern, const ModelDims& d, const ParallelConfig& cfg,
                            const Plan& plan, Precision precision) {
  MemoryBreakdown best;
  best.activations = -1;
  for (const MemoryBreakdown& m : rank_memory(pattern, d, cfg, plan, megatron_memory(d, precision)))
    if (m.total() > best.total() || best.activations < 0) best = m;
  if (best.activations < 0) best.activations = 0;
  return best;
}

std::vector<MemoryBreakdown> rank_memory(const patterns::ParsedPattern& pattern, const ModelDims& d,
                                         const ParallelConfig& cfg, const Plan& plan, const MemoryModel& model) {
  const StageContents sc = stage_contents(pattern, d, cfg, model);
  const auto& layer_bytes = sc.layer_bytes;

  std::vector<MemoryBreakdown> out;
  const double out_bytes = model.output(cfg) * (1 + pattern.mtp_depths), emb_bytes = model.embedding(cfg);
  for (const RankPlan& rp : plan.ranks) {
    // Last backward node of every (microbatch, chunk, layer) on this rank.
    std::map<std::tuple<int, int, int, bool>, int> last_backward;
    for (std::size_t i = 0; i < rp.issue.size(); ++i) {
      const Node& n = plan.node(rp.issue[i]);
      // Delayed weight gradients still need the layer's inputs: a W node ends its life.
      if ((n.phase == Phase::Backward || n.phase == Phase::Weight) && n.microbatch >= 0)
        last_backward[{n.microbatch, n.vp_stage, activation_key(n), n.mtp}] = static_cast<int>(i);
    }
    std::map<std::tuple<int, int, int, bool>, int> state;  // 1 kept, 2 working
    std::map<int, int> live_per_mb;
    double live = 0, peak = 0;
    int peak_mbs = 0;
    for (std::size_t i = 0; i < rp.issue.size(); ++i) {
      const Node& n = plan.node(rp.issue[i]);
      if (n.microbatch < 0) continue;
      const auto key = std::make_tuple(n.microbatch, n.vp_stage, activation_key(n), n.mtp);
      double kept = 0, working = 0;
      if (n.layer >= 0) {
        const auto it = layer_bytes.find({rp.pp_rank, n.vp_stage, n.layer, n.mtp});
        if (it != layer_bytes.end()) std::tie(kept, working) = it->second;
      } else if (n.slot == Slot::PreProcess) {
        kept = working = emb_bytes;
      } else if (n.slot == Slot::PostProcess) {
        kept = working = out_bytes;
      } else {
        continue;  // pipeline transfers hold no activations of their own here
      }
      int& st = state[key];
      if (n.phase == Phase::Forward && st == 0) {
        st = 1;
        live += kept;
        ++live_per_mb[n.microbatch];
      } else if ((n.phase == Phase::Recompute || n.phase == Phase::Backward || n.phase == Phase::Weight) && st == 1) {
        st = 2;  // the backward (after any recompute) holds the layer's working set
        live += working - kept;
        // A uniform unit's backward reruns the forward of all its layers at once.
        if (const auto u = sc.unit_of.find({rp.pp_rank, n.vp_stage, n.layer}); u != sc.unit_of.end() && !n.mtp)
          for (const int m : u->second) {
            int& other = state[{n.microbatch, n.vp_stage, m, false}];
            const auto mb = layer_bytes.find({rp.pp_rank, n.vp_stage, m, false});
            if (other != 1 || mb == layer_bytes.end()) continue;
            other = 2;
            live += mb->second.second - mb->second.first;
          }
      }
      if (live > peak) {
        peak = live;
        peak_mbs = 0;
        for (const auto& [mb, count] : live_per_mb) peak_mbs += count > 0;
      }
      const auto lb = last_backward.find(key);
      if (lb != last_backward.end() && lb->second == static_cast<int>(i) && st == 2) {
        live -= working;
        st = 3;
        --live_per_mb[n.microbatch];
      }
    }
    const auto pp = static_cast<std::size_t>(rp.pp_rank);
    MemoryBreakdown m;
    state_bytes(sc, cfg, model, pp, m.weights, m.gradients, m.optimizer);
    m.rank = plan.original_rank(rp.rank);
    m.activations = peak;
    m.microbatches_in_flight = peak_mbs;
    m.parameters = sc.dense[pp] + sc.expert[pp];
    out.push_back(m);
  }
  return out;
}

// --- Runtime overhead ----------------------------------------------------------------------
namespace {
// The CUDA context with lazy module loading (CUDA >= 11.7, PyTorch's default): about 400 MB
// (PyTorch maintainer, pytorch/pytorch issue 109888; 300-odd MB in issue 107667).
constexpr double kCudaContextBytes = 400e6;
// One NCCL communicator's buffers once it has run a collective: 688 MB for a group of more than
// two GPUs, 544 MB for a pair (measured per process group with a 4 MB all-reduce on 4 NVLink
// A100s, NVIDIA/nccl issue 964; the maintainers: memory grows with channels, a ring has two
// connections whatever the scale, NVIDIA/nccl issues 864 and 986).
constexpr double kNcclGroupBytes = 688e6;
constexpr double kNcclPairBytes = 544e6;
// An NCCL all-to-all connects every pair on every channel: 1.06 -> 4.34 GB after the first
// all_to_all_single on 8 H100s (NVIDIA/nccl issue 1685, 32 channels per pair).
constexpr double kNcclAllToAllBytes = 4.34e9 - 1.06e9;

// DeepEP's buffer as Megatron sizes it (moe/fused_a2a.py get_buffer: the larger of the dispatch
// and combine configs' size hints, hidden bytes = hidden x 2): DeepEP legacy Config
// get_nvl_buffer_size_hint / get_rdma_buffer_size_hint with Buffer.num_sms = 20 (10 channels),
// 8 NVLink peers, top-k and scale slots of 128, 8-byte source metadata and top-k indices, and
// the per-EP-size receive chunks of deep_ep/buffers/legacy.py (dispatch configs: 256 tokens up
// to EP 8, 288 up to 64, 480 for 96, 560 for 128, 720 beyond; RDMA 128).
double deepep_buffer_bytes(int hidden, int ep) {
  constexpr double kChannels = 10, kNvlPeers = 8, kTopk = 128, kScales = 128, kMeta = 8;
  const double nvl_ranks = std::min<double>(ep, kNvlPeers);
  const double rdma_ranks = std::max(1.0, ep / kNvlPeers);
  const double nvl_tokens = ep <= 8 ? 256 : ep <= 64 ? 288 : ep <= 96 ? 480 : ep <= 128 ? 560 : 720;
  const double hidden_bytes = 2.0 * hidden;
  const double per_token = hidden_bytes + kMeta + kTopk * 8 + kTopk * 4 + kScales * 4;
  double nvl = kChannels * nvl_ranks * (2 * rdma_ranks + 3) * 4 + kChannels * nvl_ranks * nvl_tokens * per_token;
  double rdma = 0;
  if (ep > kNvlPeers)
    rdma = kChannels * rdma_ranks * (kNvlPeers * 2 + 2) * 2 * 4 + kChannels * rdma_ranks * 128 * (per_token + 16) * 2;
  return nvl + rdma;
}

// NCCL buffers of a group of `size` ranks that runs collectives (0 for a group of one).
double nccl_group(int size) { return size <= 1 ? 0 : size == 2 ? kNcclPairBytes : kNcclGroupBytes; }
}  // namespace

RuntimeOverhead runtime_overhead(const patterns::ParsedPattern& pattern, const ModelDims& dims,
                                 const ParallelConfig& cfg, Dispatcher dispatcher) {
  RuntimeOverhead o;
  o.cuda_context = kCudaContextBytes;
  auto add = [&](double bytes) {
    if (bytes > 0) o.nccl += bytes, ++o.communicators;
  };
  const bool moe = pattern.has_moe();
  add(nccl_group(cfg.tp));                  // TP/SP all-gathers and reduce-scatters
  add(nccl_group(cfg.cp));                  // the CP ring / all-to-alls
  add(nccl_group(cfg.dp * cfg.cp));         // dense gradients and parameters (dp-cp group)
  add(cfg.pp > 1 ? kNcclPairBytes : 0);     // pipeline sends to the neighbouring stages
  add(nccl_group(cfg.global_ranks()));      // the gradient norm (clipping) over every rank
  if (moe) {
    add(nccl_group(cfg.edp()));             // expert gradients and parameters
    add(nccl_group(cfg.etp));               // expert tensor parallelism
    if (cfg.ep > 1) {
      if (dispatcher == Dispatcher::AllToAll) add(kNcclAllToAllBytes);
      else if (dispatcher == Dispatcher::AllGather) add(nccl_group(cfg.ep * cfg.etp));
      else if (dispatcher == Dispatcher::DeepEP) o.dispatcher = deepep_buffer_bytes(dims.hidden, cfg.ep);
    }
  }
  return o;
}

}  // namespace ht::schedule
