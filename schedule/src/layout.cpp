// Layout resolution and model-dependent layout rules (see layout.hpp; the rules are those of
// megatron-parallel.md 1.4, the split of 5.1).
#include "ht/schedule/layout.hpp"

#include <numeric>

#include "ht/patterns/error.hpp"
#include "ht/schedule/error.hpp"

namespace ht::schedule {
namespace {

[[noreturn]] void bad(const std::string& message) { throw ScheduleError(ErrorCode::BadConfig, message); }

std::string str(long long v) { return std::to_string(v); }

bool uses(const patterns::ParsedPattern& p, std::string_view symbols) {
  const std::string all = p.flattened_symbols() + p.mtp;
  return all.find_first_of(symbols) != std::string::npos;
}

}  // namespace

ParallelConfig resolve_layout(const LayoutRequest& r, const ModelDims& dims, ParallelConfig c) {
  c.tp = r.tp;
  c.cp = r.cp;
  c.pp = r.pp;
  c.vpp = r.vpp;
  c.ep = r.ep;
  c.etp = r.etp;
  for (auto [name, v] : {std::pair{"tp", r.tp}, {"cp", r.cp}, {"pp", r.pp}, {"ep", r.ep}, {"etp", r.etp}})
    if (v < 1) bad(std::string(name) + " = " + str(v) + " must be >= 1");
  if (r.gpus < 0 || r.dp < 0 || r.gbs < 0 || r.microbatches < 0 || r.vpp < 0)
    bad("gpus, dp, gbs, microbatches and vpp must not be negative");
  const long long model = static_cast<long long>(r.tp) * r.cp * r.pp;
  if (r.gpus > 0) {
    if (r.gpus % model != 0)
      bad("gpus = " + str(r.gpus) + " must be a multiple of tp x cp x pp = " + str(model) +
          " (world = tp x cp x pp x dp)");
    const long long dp = r.gpus / model;
    if (r.dp > 0 && r.dp != dp)
      bad("gpus = " + str(r.gpus) + " and dp = " + str(r.dp) + " disagree: tp x cp x pp x dp = " +
          str(model * r.dp));
    c.dp = static_cast<int>(dp);
  } else if (r.dp > 0) {
    c.dp = r.dp;
  } else {
    // The smallest data-parallel size whose tp x cp x dp ranks hold ep x etp.
    const long long expert = static_cast<long long>(r.ep) * r.etp;
    c.dp = static_cast<int>(expert / std::gcd(expert, static_cast<long long>(r.tp) * r.cp));
  }
  const long long per_microbatch = static_cast<long long>(c.dp) * dims.micro_batch;
  if (r.gbs > 0) {
    if (r.gbs % per_microbatch != 0)
      bad("gbs = " + str(r.gbs) + " must be a multiple of dp x mbs = " + str(c.dp) + " x " + str(dims.micro_batch) +
          " = " + str(per_microbatch) + " (microbatches = gbs / (dp x mbs))");
    const long long m = r.gbs / per_microbatch;
    if (r.microbatches > 0 && r.microbatches != m)
      bad("gbs = " + str(r.gbs) + " gives " + str(m) + " microbatches per data-parallel rank, but microbatches = " +
          str(r.microbatches));
    c.microbatches = static_cast<int>(m);
  } else {
    c.microbatches = r.microbatches > 0 ? r.microbatches : 1;
  }
  validate(c);
  return c;
}

void check_layout(const patterns::ParsedPattern& p, const ModelDims& d, const ParallelConfig& c) {
  const int t = c.tp, cp = c.cp;
  auto divides = [](long long by, long long what, const std::string& rule) {
    if (by > 0 && what % by != 0) bad(rule);
  };
  if (uses(p, "*WDCH+")) {
    divides(t, d.num_heads, "num_heads = " + str(d.num_heads) + " must be a multiple of tp = " + str(t) +
                                " (attention heads split over the tensor-parallel ranks)");
  }
  if (uses(p, "*W")) {
    if (d.num_kv_heads >= t)
      divides(t, d.num_kv_heads, "num_kv_heads = " + str(d.num_kv_heads) + " must be a multiple of tp = " + str(t));
    else
      divides(d.num_kv_heads, t, "tp = " + str(t) + " must be a multiple of num_kv_heads = " + str(d.num_kv_heads) +
                                     " when tp exceeds it (each rank holds one replicated key/value head)");
  }
  if (uses(p, "M")) {
    divides(t, d.mamba_num_heads, "mamba_num_heads = " + str(d.mamba_num_heads) + " must be a multiple of tp = " + str(t));
    divides(t, d.mamba_groups, "mamba_groups = " + str(d.mamba_groups) + " must be a multiple of tp = " + str(t));
    if (cp > 1) {
      divides(cp, d.mamba_num_heads / t,
              "mamba_num_heads / tp = " + str(d.mamba_num_heads / t) + " must be a multiple of cp = " + str(cp) +
                  " (Megatron's Mamba context parallelism exchanges whole heads)");
      const int groups = d.mamba_groups / t;
      if (groups < cp)
        divides(groups, cp, "cp = " + str(cp) + " must be a multiple of mamba_groups / tp = " + str(groups));
      else
        divides(cp, groups, "mamba_groups / tp = " + str(groups) + " must be a multiple of cp = " + str(cp));
    }
  }
  if (uses(p, "G")) {
    divides(static_cast<long long>(t) * cp, d.gdn_qk_heads(),
            "GDN key heads = " + str(d.gdn_qk_heads()) + " must be a multiple of tp x cp = " + str(t * cp));
    divides(static_cast<long long>(t) * cp, d.gdn_num_heads,
            "GDN value heads = " + str(d.gdn_num_heads) + " must be a multiple of tp x cp = " + str(t * cp));
  }
  if (uses(p, "-"))
    divides(t, d.ffn_hidden, "ffn_hidden = " + str(d.ffn_hidden) + " must be a multiple of tp = " + str(t));
  if (uses(p, "E")) {
    divides(c.ep, d.num_experts, "num_experts = " + str(d.num_experts) + " must be a multiple of ep = " + str(c.ep));
    divides(t, d.shared_expert_ffn,
            "shared_expert_ffn = " + str(d.shared_expert_ffn) + " must be a multiple of tp = " + str(t));
    divides(c.etp, d.moe_ffn_hidden,
            "moe_ffn_hidden = " + str(d.moe_ffn_hidden) + " must be a multiple of etp = " + str(c.etp));
  }
  if (cp > 1)
    divides(2LL * cp, d.seq_len,
            "seq_len = " + str(d.seq_len) + " must be a multiple of 2 x cp = " + str(2 * cp) +
                " (context parallelism cuts every sequence into 2 cp chunks)");
  if (static_cast<long long>(d.micro_batch) * d.seq_len % (static_cast<long long>(t) * cp) != 0)
    bad("mbs x seq_len = " + str(static_cast<long long>(d.micro_batch) * d.seq_len) +
        " tokens must be a multiple of tp x cp = " + str(t * cp) + " (sequence parallelism shards them)");
}

namespace {

// Megatron's uneven split (megatron-parallel.md 5.1): pp rank 0 holds F layers, rank pp-1 holds
// La, the middle ranks split the rest evenly; with vpp chunks each rank's count splits evenly
// over its chunks. Layers per stage k = j pp + r (chunk j of rank r), in model order.
std::vector<int> uneven_stage_counts(int layers, const ParallelConfig& c) {
  const PipelineSplit& s = c.split;
  const int pp = c.pp, v = c.model_chunks();
  const bool has_first = s.first_stage_layers >= 0, has_last = s.last_stage_layers >= 0;
  const int first = has_first ? s.first_stage_layers : 0, last = has_last ? s.last_stage_layers : 0;
  const int middle_ranks = pp - has_first - has_last;
  const int middle = layers - first - last;
  const std::string given = std::string(has_first ? "first stage " + str(first) : "") +
                            (has_first && has_last ? ", " : "") + (has_last ? "last stage " + str(last) : "");
  if (middle < 0)
    bad("the uneven pipeline split (" + given + " layers) asks for more than the model's " + str(layers) +
        " layers");
  if (middle_ranks == 0 && middle != 0)
    bad("the uneven pipeline split (" + given + " layers) leaves " + str(middle) +
        " layers and no middle pipeline rank to hold them (pp = " + str(pp) + ")");
  if (middle_ranks > 0 && middle % middle_ranks != 0)
    bad("the " + str(middle) + " layers between the first and last pipeline stages (" + given +
        ") do not divide evenly over the " + str(middle_ranks) + " middle ranks of pp = " + str(pp));
  const int per_middle = middle_ranks > 0 ? middle / middle_ranks : 0;
  auto rank_layers = [&](int r) { return has_first && r == 0 ? first : has_last && r == pp - 1 ? last : per_middle; };
  for (int r = 0; r < pp; ++r)
    if (rank_layers(r) % v != 0)
      bad("pipeline rank " + str(r) + " holds " + str(rank_layers(r)) + " layers, which do not divide over its vpp = " +
          str(v) + " model chunks (" + given + ")");
  std::vector<int> counts;
  for (int k = 0; k < pp * v; ++k) counts.push_back(rank_layers(k % pp) / v);
  return counts;
}

// Stage k (= chunk k / pp of pp rank k % pp) takes the next counts[k] logical layers.
std::vector<patterns::StageSlice> slice_items(const std::vector<patterns::Item>& items, const std::vector<int>& counts,
                                              int pp) {
  std::vector<patterns::StageSlice> out;
  int next = 0, physical = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    patterns::StageSlice s;
    s.pp_rank = static_cast<int>(k) % pp;
    s.vp_stage = static_cast<int>(k) / pp;
    s.logical_offset = next;
    s.physical_offset = physical;
    for (int i = 0; i < counts[k]; ++i) {
      s.items.push_back(items[static_cast<std::size_t>(next + i)]);
      physical += items[static_cast<std::size_t>(next + i)].physical_count();
    }
    next += counts[k];
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<patterns::StageSlice> split_stages(const patterns::ParsedPattern& p, const ParallelConfig& c,
                                               PipelineSplit* used) {
  const bool asked = c.split.account_embedding || c.split.account_loss;
  if (c.split.uneven()) {
    if (asked)
      bad("first/last pipeline stage layer counts cannot be combined with counting the embedding or loss as a "
          "layer (Megatron's rule)");
    if (c.pp < 2) bad("first/last pipeline stage layer counts need pp > 1 (pp = " + str(c.pp) + ")");
    if (p.segment_count() > 1)
      bad("first/last pipeline stage layer counts cannot be combined with '|' separators, which already define the "
          "stages");
    // Counted in decoder (logical) layers, as Megatron's GPT path counts them: a bracketed group is
    // one layer. Without groups this is the hybrid path's physical count too.
    if (used) *used = c.split;
    return slice_items(p.items(), uneven_stage_counts(p.logical_count(), c), c.pp);
  }
  if (p.segment_count() > 1 || (c.vpp <= 1 && !asked)) {
    if (asked) bad("counting the embedding or loss as a pipeline layer applies to patterns without '|' segments");
    patterns::PipelineConfig pipeline;
    pipeline.pp = c.pp;
    if (c.vpp > 0) pipeline.vpp = c.vpp;
    try {
      if (used) *used = c.split;
      return patterns::allocate_stages(p, pipeline);
    } catch (const patterns::PatternError& e) {
      // The legacy physical split did not divide: Megatron's logical split below may.
      if (p.segment_count() > 1 || c.pp == 1 || e.rule() != patterns::Rule::R7_UnevenSplit) throw;
    }
  }
  const int stages = c.pp * c.model_chunks();
  const std::vector<patterns::Item> items = p.items();
  const int layers = static_cast<int>(items.size());
  PipelineSplit split = c.split;
  if (!asked && layers % stages != 0) {
    for (PipelineSplit s : {PipelineSplit{true, true}, PipelineSplit{true, false}, PipelineSplit{false, true}})
      if ((layers + s.account_embedding + s.account_loss) % stages == 0) {
        split = s;
        break;
      }
  }
  const int slots = layers + split.account_embedding + split.account_loss;
  if (slots % stages != 0)
    bad(str(layers) + " logical layers" + (split.account_embedding ? " + embedding" : "") +
        (split.account_loss ? " + loss" : "") + " do not split evenly over pp x vpp = " + str(c.pp) + " x " +
        str(c.model_chunks()) + " = " + str(stages) + " stages" +
        (asked ? "" : " (nor with the embedding and/or loss counted as a layer)") +
        "; pick pp and vpp that divide them or write the stages with '|'");
  const int per_stage = slots / stages;
  if ((split.account_embedding || split.account_loss) && per_stage < 2 && stages == 1)
    bad("a single stage cannot count both the embedding and the loss as layers");
  std::vector<int> counts(static_cast<std::size_t>(stages), per_stage);
  if (split.account_embedding) --counts.front();
  if (split.account_loss) --counts.back();
  if (used) *used = split;
  return slice_items(items, counts, c.pp);
}

std::string describe_layout(const ParallelConfig& c) {
  std::string s = "tp " + str(c.tp) + " x cp " + str(c.cp) + " x dp " + str(c.dp) + " x pp " + str(c.pp);
  if (c.vpp > 0) s += " (vpp " + str(c.vpp) + ")";
  s += " = " + str(c.global_ranks()) + " GPUs; experts ep " + str(c.ep) + " x etp " + str(c.etp) + " x edp " +
       str(c.edp());
  return s;
}

}  // namespace ht::schedule
