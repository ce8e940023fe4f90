// Megatron-LM arguments translated into hybrid-twin flags (see megatron_args.hpp). The mapping
// follows Megatron's argument defaults (megatron/training/arguments.py, megatron-parallel.md):
// tied embeddings unless untied, no SwiGLU unless asked, FFN 4 x hidden, one KV head per head
// without GQA, ETP = TP unless given, the distributed optimizer, gradient/parameter overlap,
// EP overlap and delayed wgrad all off unless asked. docs/inputs.md lists it argument by argument.
#include "megatron_args.hpp"

#include <cstdlib>
#include <algorithm>
#include <functional>
#include <cmath>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "command.hpp"
#include "ht/io/input_file.hpp"
#include "ht/schedule/model_card.hpp"

namespace ht::cli {
namespace {

[[noreturn]] void refuse(const std::string& message) { throw UsageError("--megatron-args: " + message); }

std::string shown(const std::string& s) { return s.size() > 60 ? s.substr(0, 60) + "..." : s; }

// Shell-like words: quotes, backslash escapes and continuations, # comments at a word's start.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] != '\n') cur += text[i + 1], in_word = true;
      ++i;
    } else if (c == '\'' || c == '"') {
      const std::size_t end = text.find(c, i + 1);
      if (end == std::string::npos) refuse("an unmatched " + std::string(1, c) + " quote");
      cur += text.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) out.push_back(cur), cur.clear(), in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

// Megatron's arguments: each --name with the values that follow it (none for a switch).
using Args = std::map<std::string, std::vector<std::string>>;

struct Parsed {
  Args args;
  std::vector<std::string> off;  // YAML switches set to false: Megatron's default, nothing to do
  int world = 0;                 // the launcher's nodes x processes per node, 0 when not given
};

Parsed parse(const std::vector<std::string>& all) {
  Parsed p;
  std::size_t start = 0;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].size() > 3 && all[i].ends_with(".py")) {
      start = i + 1;
      break;
    }
  // The launcher's options (torchrun / python -m torch.distributed.run).
  std::optional<int> nodes, per_node;
  for (std::size_t i = 0; start > 0 && i + 1 < start; ++i) {
    std::string k = all[i], v = all[i + 1];
    if (const auto eq = k.find('='); eq != std::string::npos) v = k.substr(eq + 1), k = k.substr(0, eq);
    std::replace(k.begin(), k.end(), '_', '-');
    auto number = [&](std::optional<int>& slot) {
      std::size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != v.size()) refuse("launcher option " + k + " = '" + shown(v) + "' is not a number");
      if (n < 1) refuse("launcher option " + k + " = " + v + " must be at least 1");
      slot = n;
    };
    if (k == "--nnodes") number(nodes);
    if (k == "--nproc-per-node") number(per_node);
  }
  if (nodes || per_node) {
    // The launch's world size, bounded by the largest plan the twin builds (2^19 ranks).
    const long long world = static_cast<long long>(nodes.value_or(1)) * per_node.value_or(1);
    if (world > (1LL << 19))
      refuse("--nnodes x --nproc-per-node = " + std::to_string(world) + " GPUs, more than the 524288 a plan holds");
    p.world = static_cast<int>(world);
  }
  std::string current;
  for (std::size_t i = start; i < all.size(); ++i) {
    std::string w = all[i];
    if (w.starts_with("--")) {
      std::string value;
      bool has_value = false;
      if (const auto eq = w.find('='); eq != std::string::npos) value = w.substr(eq + 1), w = w.substr(0, eq), has_value = true;
      const bool yaml = w.ends_with(":");
      if (yaml) w.pop_back();
      std::replace(w.begin(), w.end(), '_', '-');
      if (yaml && i + 1 < all.size() && !all[i + 1].starts_with("--")) {  // --flag: value
        const std::string v = all[++i];
        if (v == "false") {
          p.off.push_back(w);
          current.clear();
          continue;
        }
        current = w;
        p.args[w];
        if (v != "true") p.args[w].push_back(v);
        continue;
      }
      current = w;
      p.args[w];
      if (has_value) p.args[w].push_back(value);
    } else if (!current.empty()) {
      p.args[current].push_back(w);
    } else {
      refuse("'" + shown(w) + "' is not an argument (expected --name)");
    }
  }
  return p;
}

class Translator {
 public:
  Translator(Parsed parsed, const schedule::ModelCard* card, bool vocab_typed,
             std::optional<std::string> typed_pattern)
      : a_(std::move(parsed.args)), off_(std::move(parsed.off)), world_(parsed.world), card_(card != nullptr),
        card_moe_(card && card->dims.num_experts > 0),
        card_mla_(card && card->pattern.find_first_of("+DCH") != std::string::npos),
        card_mamba_(card && card->pattern.find('M') != std::string::npos),
        vocab_typed_(vocab_typed), typed_pattern_(std::move(typed_pattern)) {}

  MegatronTranslation run() {
    for (const auto& [k, v] : a_)
      for (const std::string& x : v)
        if (x.find('$') != std::string::npos)
          refuse(k + " = '" + shown(x) + "' holds an unexpanded shell variable: give the value itself");
    refuse_unsupported();
    model();
    layout();
    step();
    // Arguments that change what a real run does in ways the twin does not model (memory held by
    // FP8 weight copies, gradient bytes, routing bias, graph capture): never silent, never fatal.
    static const std::set<std::string> approximated{
        "--fp8-param-gather", "--moe-router-enable-expert-bias",
        "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--cuda-graph-impl", "--cuda-graph-scope",
        "--enable-cuda-graph", "--external-cuda-graph", "--empty-unused-memory-level", "--moe-grouped-gemm",
        "--moe-router-score-function", "--moe-router-topk-scaling-factor", "--accumulate-allreduce-grads-in-fp32",
        "--use-precision-aware-optimizer", "--main-grads-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"};
    for (const auto& [k, v] : a_)
      if (!consumed_.count(k)) (approximated.count(k) ? t_.approximated : t_.ignored).push_back(k);
    for (const std::string& k : off_)
      if (!a_.count(k)) t_.ignored.push_back(k);
    std::sort(t_.ignored.begin(), t_.ignored.end());
    t_.ignored.erase(std::unique(t_.ignored.begin(), t_.ignored.end()), t_.ignored.end());
    return t_;
  }

 private:
  Args a_;
  std::vector<std::string> off_;
  int world_;
  bool card_, card_moe_, card_mla_, card_mamba_, vocab_typed_;
  std::optional<std::string> typed_pattern_;  // --pattern typed on the command line: it wins
  bool moe_ = false;  // the model has experts (the arguments' --num-experts, else the card's)
  std::set<std::string> consumed_;
  MegatronTranslation t_;

  bool has(const std::string& k) const { return a_.count(k) > 0; }
  // Whether the model run has Mamba layers: the typed pattern's, else the file's hybrid pattern's,
  // else none for a --num-layers (GPT) stack, else the card's. Read without marking anything used.
  bool has_mamba() const {
    if (typed_pattern_) return typed_pattern_->find('M') != std::string::npos;
    for (const char* k : {"--hybrid-override-pattern", "--hybrid-layer-pattern"})
      if (const auto it = a_.find(k); it != a_.end())
        return std::any_of(it->second.begin(), it->second.end(),
                           [](const std::string& v) { return v.find('M') != std::string::npos; });
    if (has("--num-layers")) return false;
    return card_mamba_;
  }
  // The single value of k, marked used; nullopt when absent.
  std::optional<std::string> value(const std::string& k) {
    const auto it = a_.find(k);
    if (it == a_.end()) return std::nullopt;
    if (it->second.size() != 1) refuse(k + " takes one value, got " + std::to_string(it->second.size()));
    use(k);
    return it->second.front();
  }
  void use(const std::string& k) {
    if (consumed_.insert(k).second) {
      std::string s = k;
      for (const std::string& v : a_.at(k)) s += " " + v;
      t_.used.push_back(s);
    }
  }
  bool flag(const std::string& k) {
    if (!has(k)) return false;
    if (!a_.at(k).empty()) refuse(k + " is a switch and takes no value, got '" + shown(a_.at(k).front()) + "'");
    use(k);
    return true;
  }
  long long integer(const std::string& k, const std::string& v) {
    std::size_t end = 0;
    long long x = 0;
    try {
      x = std::stoll(v, &end);
    } catch (const std::exception&) {
      end = 0;
    }
    if (end != v.size() || end == 0) refuse(k + " = '" + shown(v) + "' is not an integer");
    if (x < 0 || x > (1LL << 31) - 1) refuse(k + " = " + v + " is out of range");
    return x;
  }
  std::optional<long long> int_value(const std::string& k) {
    const auto v = value(k);
    return v ? std::optional<long long>(integer(k, *v)) : std::nullopt;
  }
  void emit(const std::string& flag_name, long long v) { emit(flag_name, std::to_string(v)); }
  void emit(const std::string& flag_name, const std::string& v) {
    t_.args.push_back(flag_name);
    t_.args.push_back(v);
  }
  void emit(const std::string& flag_name) { t_.args.push_back(flag_name); }
  // A model field: always from the arguments when given; from Megatron's default when no card.
  void field(const std::string& flag_name, std::optional<long long> given, long long megatron_default) {
    if (given) emit(flag_name, *given);
    else if (!card_) emit(flag_name, megatron_default);
  }

  void refuse_unsupported() {
    const std::vector<std::pair<std::string, std::string>> not_described{
        {"--moe-expert-capacity-factor", "token dropping (a capacity factor) is not modelled; the twin is dropless"},
        {"--moe-pad-expert-input-to-capacity", "padding experts to capacity is not modelled"},
        {"--cpu-offloading", "layer-level activation offloading is not modelled (--fine-grained-activation-offloading is)"},
        {"--pipeline-model-parallel-layout", "explicit pipeline layouts are not read yet; use "
                                             "--decoder-first/last-pipeline-num-layers"},
        {"--num-experts-per-rank", "not a Megatron argument the twin knows"},
    };
    for (const auto& [k, why] : not_described)
      if (has(k)) refuse(k + ": " + why);
    if (!has("--bf16") && !has("--fp16"))
      refuse("neither --bf16 nor --fp16: FP32 training is not modelled (the twin prices 16-bit activations)");
  }

  // MoE layers: --moe-layer-freq k (every k-th layer) or a list such as ([0]*3+[1]*58).
  std::vector<bool> moe_layers(int layers, bool moe) {
    std::vector<bool> out(static_cast<std::size_t>(layers), moe);
    const auto freq = value("--moe-layer-freq");
    if (!freq) return out;
    if (!moe) refuse("--moe-layer-freq without experts (--num-experts, or a MoE --model card)");
    std::string f;
    for (char c : *freq)
      if (!std::isspace(static_cast<unsigned char>(c)) && c != '(' && c != ')') f += c;
    if (f.find('[') == std::string::npos) {
      const long long k = integer("--moe-layer-freq", f);
      if (k < 1) refuse("--moe-layer-freq = " + f + " must be >= 1");
      for (int i = 0; i < layers; ++i) out[static_cast<std::size_t>(i)] = i % k == 0;
      return out;
    }
    std::vector<bool> list;
    std::size_t i = 0;
    while (i < f.size()) {  // terms [a,b,...] or [a,b,...]*n, joined by +
      if (f[i] != '[') refuse("--moe-layer-freq = '" + shown(*freq) + "': expected [0/1,...] terms joined by +");
      const std::size_t close = f.find(']', i);
      if (close == std::string::npos) refuse("--moe-layer-freq = '" + shown(*freq) + "': unclosed [");
      std::vector<bool> term;
      std::string inner = f.substr(i + 1, close - i - 1);
      for (std::size_t s = 0; s <= inner.size();) {
        const std::size_t comma = std::min(inner.find(',', s), inner.size());
        const std::string item = inner.substr(s, comma - s);
        if (item != "0" && item != "1") refuse("--moe-layer-freq = '" + shown(*freq) + "': items must be 0 or 1");
        term.push_back(item == "1");
        s = comma + 1;
      }
      i = close + 1;
      long long times = 1;
      if (i < f.size() && f[i] == '*') {
        const std::size_t end = f.find('+', i);
        times = integer("--moe-layer-freq", f.substr(i + 1, (end == std::string::npos ? f.size() : end) - i - 1));
        i = end == std::string::npos ? f.size() : end;
      }
      if (times > layers) refuse("--moe-layer-freq = '" + shown(*freq) + "' is longer than --num-layers");
      for (long long r = 0; r < times; ++r) list.insert(list.end(), term.begin(), term.end());
      if (i < f.size()) {
        if (f[i] != '+') refuse("--moe-layer-freq = '" + shown(*freq) + "': expected + between terms");
        ++i;
      }
    }
    if (static_cast<int>(list.size()) != layers)
      refuse("--moe-layer-freq lists " + std::to_string(list.size()) + " layers, --num-layers says " +
             std::to_string(layers));
    return list;
  }

  void model() {
    const auto hidden = int_value("--hidden-size");
    const auto heads = int_value("--num-attention-heads");
    if (heads && *heads < 1) refuse("--num-attention-heads = " + std::to_string(*heads) + " must be at least 1");
    if (!card_ && (!hidden || !heads))
      refuse("the model needs --hidden-size and --num-attention-heads (or give a --model card)");
    field("--hidden", hidden, 0);
    field("--num-heads", heads, 0);
    const bool gqa = flag("--group-query-attention");
    auto groups = int_value("--num-query-groups");
    if (groups && !gqa) groups.reset();  // Megatron reads it only with GQA
    if (!groups && !card_) groups = heads;
    if (gqa && !groups) refuse("--group-query-attention without --num-query-groups");
    field("--num-kv-heads", groups, 0);
    const bool mla = flag("--multi-latent-attention");
    auto head_dim = int_value(mla ? "--qk-head-dim" : "--kv-channels");
    if (!head_dim && !card_ && mla) head_dim = 128;  // Megatron's --qk-head-dim default
    if (!head_dim && !card_ && hidden && heads) head_dim = *hidden / *heads;
    field("--head-dim", head_dim, 0);
    if (mla) {
      field("--q-lora-rank", int_value("--q-lora-rank"), 1536);
      field("--kv-lora-rank", int_value("--kv-lora-rank"), 512);
      field("--mla-rope-head-dim", int_value("--qk-pos-emb-head-dim"), 64);
      field("--mla-v-head-dim", int_value("--v-head-dim"), 128);
    }
    const bool swiglu = flag("--swiglu");
    if (swiglu || !card_) emit("--gated-ffn", swiglu ? 1 : 0);
    const auto ffn = int_value("--ffn-hidden-size");
    field("--ffn-hidden", ffn, hidden ? 4 * *hidden : 0);
    const bool untie = flag("--untie-embeddings-and-output-weights");
    if (untie || !card_) emit("--tied-embeddings", untie ? 0 : 1);
    if (flag("--qk-layernorm") || !card_) emit("--qk-norm", has("--qk-layernorm") ? 1 : 0);
    if (const auto rp = value("--rotary-percent")) {
      double v = 0;
      try {
        v = std::stod(*rp);
      } catch (const std::exception&) {
        refuse("--rotary-percent = '" + shown(*rp) + "' is not a number");
      }
      if (!(v > 0 && v <= 1)) refuse("--rotary-percent = " + *rp + " must be in (0, 1]");
      emit("--rotary-percent", std::llround(v * 100));
    }
    // The vocabulary: padded as given, or the tokenizer's size padded as Megatron pads it.
    if (const auto padded = int_value("--padded-vocab-size")) {
      emit("--vocab", *padded);
    } else if (const auto vocab = int_value("--vocab-size")) {
      const long long tp = int_value("--tensor-model-parallel-size").value_or(1);
      const long long by = int_value("--make-vocab-size-divisible-by").value_or(128);
      if (by < 1) refuse("--make-vocab-size-divisible-by = " + std::to_string(by) + " must be at least 1");
      const long long divisible = by * std::max(1LL, tp);
      emit("--vocab", (*vocab + divisible - 1) / divisible * divisible);
    } else if (!card_ && !vocab_typed_) {
      refuse("the vocabulary is unknown: give --padded-vocab-size or --vocab-size (the tokenizer is not read), "
             "or a --model card");
    }
    const auto experts = int_value("--num-experts");
    if (experts) emit("--num-experts", *experts);  // dense without: no MoE layer reads it
    if (experts) {
      field("--top-k", int_value("--moe-router-topk"), 2);
      field("--moe-ffn-hidden", int_value("--moe-ffn-hidden-size"), ffn ? *ffn : hidden ? 4 * *hidden : 0);
      field("--shared-expert-ffn", int_value("--moe-shared-expert-intermediate-size"), 0);
      if (flag("--moe-shared-expert-gate")) emit("--shared-expert-gate", 1);
      if (const auto g = int_value("--moe-router-num-groups")) emit("--router-groups", *g);
      if (const auto g = int_value("--moe-router-group-topk")) emit("--router-group-topk", *g);
    }
    // Mamba-2 mixers (megatron/core/ssm/mamba_mixer.py defaults: state 128, head dim 64, 8 groups,
    // heads = 2 x hidden / head dim); read when the arguments describe the model or state them, and
    // only for a model with Mamba layers: without one, Megatron builds no mixer and checks none of
    // them (its derived heads, e.g. 2 x 2880 / 64 = 90, need not divide into 8 groups), so the
    // arguments are reported ignored and the twin's own (unused) defaults stay.
    if (has_mamba()) mamba();
    if (const auto seq = int_value("--seq-length")) emit("--seq-len", *seq);
    moe_ = experts ? *experts > 0 : card_moe_;
    pattern(mla || card_mla_, moe_);
  }

  void mamba() {
    const auto hidden = int_value("--hidden-size");
    const auto state = int_value("--mamba-state-dim");
    const auto mamba_head = int_value("--mamba-head-dim");
    const auto mamba_groups = int_value("--mamba-num-groups");
    auto mamba_heads = int_value("--mamba-num-heads");
    if (mamba_head && *mamba_head < 1) refuse("--mamba-head-dim = " + std::to_string(*mamba_head) + " must be at least 1");
    if (!mamba_heads && hidden && (!card_ || mamba_head)) mamba_heads = 2 * *hidden / mamba_head.value_or(64);
    field("--mamba-state", state, 128);
    field("--mamba-head-dim", mamba_head, 64);
    field("--mamba-groups", mamba_groups, 8);
    field("--mamba-num-heads", mamba_heads, 0);
  }

  void pattern(bool mla, bool moe) {
    std::optional<std::string> hybrid = value("--hybrid-override-pattern");
    if (!hybrid) hybrid = value("--hybrid-layer-pattern");
    const auto layers = int_value("--num-layers");
    const auto mtp = int_value("--mtp-num-layers");
    if (hybrid) {
      std::string p = *hybrid;
      if (mtp && *mtp > 0 && p.find('/') == std::string::npos)
        refuse("--mtp-num-layers with a hybrid pattern: write the MTP depths in the pattern ('/...')");
      emit("--pattern", p);
      return;
    }
    if (!layers) {
      if (!card_) refuse("the model needs --num-layers (or --hybrid-override-pattern, or a --model card)");
      return;
    }
    if (*layers < 1 || *layers > 4096) refuse("--num-layers = " + std::to_string(*layers) + " is out of range");
    const char attn = mla ? '+' : '*';
    std::string p;
    for (bool e : moe_layers(static_cast<int>(*layers), moe)) p += std::string("[") + attn + (e ? 'E' : '-') + "]";
    for (long long d = 0; d < mtp.value_or(0); ++d) p += std::string("/") + attn + (moe ? 'E' : '-');
    emit("--pattern", p);
  }

  void layout() {
    const long long tp = int_value("--tensor-model-parallel-size").value_or(1);
    const long long pp = int_value("--pipeline-model-parallel-size").value_or(1);
    if (pp < 1) refuse("--pipeline-model-parallel-size = " + std::to_string(pp) + " must be at least 1");
    emit("--tp", tp);
    emit("--pp", pp);
    emit("--cp", int_value("--context-parallel-size").value_or(1));
    emit("--ep", int_value("--expert-model-parallel-size").value_or(1));
    const auto etp = int_value("--expert-tensor-parallel-size");
    if (etp || moe_) emit("--etp", etp.value_or(tp));  // Megatron: ETP = TP by default
    const bool sp = flag("--sequence-parallel");
    if (tp > 1 && !sp)
      refuse("--tensor-model-parallel-size " + std::to_string(tp) +
             " without --sequence-parallel: the twin models TP with sequence parallelism (Megatron requires it "
             "with MoE)");
    if (world_ > 0) emit("--gpus", world_);
    if (const auto mbs = int_value("--micro-batch-size")) emit("--mbs", *mbs);
    if (const auto gbs = int_value("--global-batch-size")) emit("--gbs", *gbs);
    const bool emb = flag("--account-for-embedding-in-pipeline-split");
    const bool loss = flag("--account-for-loss-in-pipeline-split");
    if (emb) emit("--account-for-embedding");
    if (loss) emit("--account-for-loss");
    const auto first = int_value("--decoder-first-pipeline-num-layers");
    const auto last = int_value("--decoder-last-pipeline-num-layers");
    if (first) emit("--decoder-first-pipeline-num-layers", *first);
    if (last) emit("--decoder-last-pipeline-num-layers", *last);
    if (const auto v = int_value("--num-virtual-stages-per-pipeline-rank")) emit("--vpp", *v);
    if (const auto per = int_value("--num-layers-per-virtual-pipeline-stage")) {
      if (first || last)
        refuse("--num-layers-per-virtual-pipeline-stage with uneven first/last stages: give "
               "--num-virtual-stages-per-pipeline-rank instead");
      const long long layers = int_value("--num-layers").value_or(0);
      const long long slots = layers + emb + loss;
      if (*per < 1 || layers == 0 || slots % (pp * *per) != 0)
        refuse("--num-layers-per-virtual-pipeline-stage " + std::to_string(*per) + " does not divide the " +
               std::to_string(slots) + " layer slots of pp " + std::to_string(pp));
      emit("--vpp", slots / (pp * *per));
    }
  }

  void step() {
    // Megatron's defaults are off; the twin's are on: every switch is stated.
    if (flag("--use-megatron-fsdp") || flag("--use-custom-fsdp")) {
      if (const auto strategy = value("--data-parallel-sharding-strategy"); strategy && *strategy != "optim_grads_params")
        refuse("--data-parallel-sharding-strategy " + *strategy +
               ": the twin describes Megatron-FSDP's optim_grads_params (weights, gradients and optimizer sharded)");
      emit("--fsdp");
    }
    if (!flag("--use-distributed-optimizer")) emit("--no-distributed-optimizer");
    if (!flag("--overlap-grad-reduce")) emit("--no-overlap-grad-reduce");
    if (!flag("--overlap-param-gather")) emit("--no-overlap-param-gather");
    // Gradients kept and reduced in bf16: Megatron's switch, or Megatron-FSDP's wire dtype.
    const auto fsdp_comm_dtype = value("--megatron-fsdp-grad-comm-dtype");
    if (flag("--grad-reduce-in-bf16") || fsdp_comm_dtype == "bf16") emit("--grad-reduce-in-bf16");
    emit(flag("--overlap-moe-expert-parallel-comm") ? "--overlap" : "--no-overlap");
    emit(flag("--delay-wgrad-compute") ? "--delay-wgrad" : "--no-delay-wgrad");
    if (flag("--tp-comm-overlap")) emit("--tp-comm-overlap");
    // The loss fused (Transformer Engine's or Megatron's native kernels: the twin prices them alike).
    if (flag("--cross-entropy-loss-fusion")) emit("--cross-entropy-fusion");
    (void)value("--cross-entropy-fusion-impl");
    // Recomputation.
    const auto granularity = value("--recompute-granularity");
    if (flag("--recompute-activations") && !granularity) emit("--recompute", "core_attn");
    if (granularity == "full") {
      const auto method = value("--recompute-method");
      const auto n = int_value("--recompute-num-layers");
      emit("--recompute", "full");
      if (method == "block") {
        if (!n) refuse("--recompute-method block without --recompute-num-layers");
        emit("--recompute-method", "block");
        emit("--recompute-num-layers", *n);
      } else if (method && method != "uniform") {
        refuse("--recompute-method = '" + shown(*method) + "' (expected uniform or block)");
      } else if (n && *n == 0) {
        // Megatron's uniform method steps through the layers N at a time: N = 0 never advances.
        refuse(std::string(method ? "--recompute-method uniform" : "--recompute-granularity full (uniform units)") +
               " with --recompute-num-layers = 0: needs --recompute-num-layers N >= 1 (layers per recomputed unit)");
      } else if (n && *n > 1) {
        emit("--recompute-method", "uniform");
        emit("--recompute-num-layers", *n);
      }
    } else if (granularity == "selective") {
      std::string modules;
      if (has("--recompute-modules")) {
        use("--recompute-modules");
        for (const std::string& m : a_.at("--recompute-modules")) modules += (modules.empty() ? "" : ",") + m;
      }
      emit("--recompute", modules.empty() ? "core_attn" : modules);  // Megatron's default module
    } else if (granularity) {
      refuse("--recompute-granularity = '" + shown(*granularity) + "' (expected full or selective)");
    }
    // Fine-grained activation offloading: the modules, when the switch is on; what the twin does
    // not model changes the answer and is refused.
    if (flag("--fine-grained-activation-offloading")) {
      if (!has("--offload-modules")) refuse("--fine-grained-activation-offloading without --offload-modules");
      use("--offload-modules");
      std::string modules;
      for (const std::string& m : a_.at("--offload-modules")) modules += (modules.empty() ? "" : ",") + m;
      emit("--offload-modules", modules);
      if (const auto f = value("--activation-offload-fraction"); f && std::strtod(f->c_str(), nullptr) != 1.0)
        refuse("--activation-offload-fraction = '" + shown(*f) + "' (the twin offloads every eligible group: 1)");
      if (const auto d = int_value("--delta-offload-bytes-across-pp-ranks"); d && *d != 0)
        refuse("--delta-offload-bytes-across-pp-ranks = " + std::to_string(*d) + " (the twin offloads alike on every stage: 0)");
      if (const auto m = int_value("--min-offloaded-tensor-size"); m && *m != 1048576)
        refuse("--min-offloaded-tensor-size = " + std::to_string(*m) + " (the twin offloads every listed module's tensors)");
    }
    // The dispatcher.
    if (const auto d = value("--moe-token-dispatcher-type")) {
      std::string backend = "deepep";
      if (const auto b = value("--moe-flex-dispatcher-backend")) backend = *b;
      if (*d == "alltoall" || *d == "allgather") emit("--moe-dispatcher", *d);
      else if (*d == "flex" && (backend == "deepep" || backend == "hybridep")) emit("--moe-dispatcher", backend);
      else refuse("--moe-token-dispatcher-type " + *d + " (backend " + backend + ") is not one the twin models");
    }
    if (flag("--moe-enable-deepep")) emit("--moe-dispatcher", "deepep");
    if (flag("--moe-router-force-load-balancing")) emit("--routing", "force-balance");
    // Number formats.
    flag("--bf16");
    flag("--fp16");
    if (const auto fmt = value("--fp8-format")) {
      if (*fmt != "e4m3" && *fmt != "hybrid") refuse("--fp8-format = '" + shown(*fmt) + "' (expected e4m3 or hybrid)");
      const auto recipe = value("--fp8-recipe");
      emit("--precision", recipe == "mxfp8" ? "mxfp8" : "fp8");
    }
  }
};

}  // namespace

MegatronTranslation translate_megatron_args(const std::string& text, const schedule::ModelCard* card,
                                            bool vocab_typed, const std::optional<std::string>& typed_pattern) {
  return Translator(parse(words(text)), card, vocab_typed, typed_pattern).run();
}

std::vector<std::string> expand_megatron_args(const std::vector<std::string>& argv,
                                              const std::function<bool(const std::string&)>& accepts,
                                              std::string& report) {
  std::size_t at = argv.size();
  std::string file;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--megatron-args") {
      if (i + 1 >= argv.size()) throw UsageError("--megatron-args needs a FILE");
      at = i;
      file = argv[i + 1];
      break;
    }
    if (argv[i].starts_with("--megatron-args=")) {
      at = i;
      file = argv[i].substr(16);
      break;
    }
  }
  if (at == argv.size()) return argv;
  if (argv.size() < 2 || (argv[1] != "plan" && argv[1] != "simulate" && argv[1] != "search"))
    throw UsageError("--megatron-args applies to plan, simulate and search");
  const std::size_t width = argv[at] == "--megatron-args" ? 2 : 1;
  std::vector<std::string> rest;
  for (std::size_t i = 2; i < argv.size(); ++i)
    if (i < at || i >= at + width) rest.push_back(argv[i]);
  // Flags the command line gives itself win: drop them (and their value) from the translation. A
  // switch and its --no- form are one setting; aliases name the same option.
  auto setting = [](std::string k) {
    static const std::map<std::string, std::string> alias{
        {"--first-stage-layers", "--decoder-first-pipeline-num-layers"},
        {"--last-stage-layers", "--decoder-last-pipeline-num-layers"}};
    if (const auto it = alias.find(k); it != alias.end()) k = it->second;
    return k.starts_with("--no-") ? "--" + k.substr(5) : k;
  };
  std::set<std::string> typed;
  for (const std::string& s : rest)
    if (s.starts_with("--")) typed.insert(setting(s.substr(0, s.find('='))));
  std::optional<schedule::ModelCard> card;
  std::optional<std::string> pattern;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == "--model" && i + 1 < rest.size()) card = schedule::resolve_model(rest[i + 1]);
    if (rest[i].starts_with("--model=")) card = schedule::resolve_model(rest[i].substr(8));
    if (rest[i] == "--pattern" && i + 1 < rest.size()) pattern = rest[i + 1];
    if (rest[i].starts_with("--pattern=")) pattern = rest[i].substr(10);
  }
  const std::string text = io::read_input_file(file, 1 << 20, "Megatron arguments");
  MegatronTranslation t = translate_megatron_args(text, card ? &*card : nullptr, typed.count("--vocab") > 0, pattern);
  std::vector<std::string> out{argv[0], argv[1]};
  for (std::size_t i = 0; i < t.args.size(); ++i) {
    const bool has_value = i + 1 < t.args.size() && !t.args[i + 1].starts_with("--");
    if (typed.count(setting(t.args[i]))) {
      i += has_value;
      continue;
    }
    out.push_back(t.args[i]);
    if (has_value) out.push_back(t.args[++i]);
  }
  if (argv[1] == "search") {  // search takes lists and no single-layout or step flags
    std::vector<std::string> kept{out[0], out[1]};
    static const std::map<std::string, std::string> as_list{{"--tp", "--tp-list"}, {"--cp", "--cp-list"},
                                                            {"--pp", "--pp-list"}, {"--vpp", "--vpp-list"},
                                                            {"--ep", "--ep-list"}, {"--etp", "--etp-list"},
                                                            {"--mbs", "--mbs-list"}, {"--recompute", "--recompute-list"}};
    static const std::set<std::string> dropped{"--no-distributed-optimizer", "--no-overlap-grad-reduce",
                                               "--grad-reduce-in-bf16", "--no-overlap-param-gather",
                                               "--delay-wgrad", "--no-delay-wgrad",
                                               "--account-for-embedding", "--account-for-loss"};
    for (std::size_t i = 2; i < out.size(); ++i) {
      const std::string& k = out[i];
      if (dropped.count(k)) continue;
      if (k == "--overlap" || k == "--no-overlap") {
        kept.insert(kept.end(), {"--overlap-list", k == "--overlap" ? "on" : "off"});
        continue;
      }
      if (const auto it = as_list.find(k); it != as_list.end()) {
        if (!typed.count(it->second)) kept.insert(kept.end(), {it->second, out[i + 1]});
        ++i;
        continue;
      }
      kept.push_back(k);
    }
    out = std::move(kept);
  }
  // What this command has no option for (plan prices nothing: no dispatcher, routing or precision).
  std::vector<std::string> unused_here;
  if (accepts) {
    std::vector<std::string> kept{out[0], out[1]};
    for (std::size_t i = 2; i < out.size(); ++i) {
      const bool has_value = i + 1 < out.size() && !out[i + 1].starts_with("--");
      if (accepts(out[i])) {
        kept.push_back(out[i]);
        if (has_value) kept.push_back(out[i + 1]);
      } else {
        unused_here.push_back(out[i] + (has_value ? " " + out[i + 1] : ""));
      }
      i += has_value;
    }
    out = std::move(kept);
  }
  out.insert(out.end(), rest.begin(), rest.end());
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  report = "megatron-args: used " + std::to_string(t.used.size()) + ": " + join(t.used) + "\n" +
           "megatron-args: ignored " + std::to_string(t.ignored.size()) + (t.ignored.empty() ? "" : ": ") +
           join(t.ignored) + "\n";
  if (!t.approximated.empty()) report += "megatron-args: not modelled, the real run may differ: " + join(t.approximated) + "\n";
  if (!unused_here.empty()) report += "megatron-args: not used by " + argv[1] + ": " + join(unused_here) + "\n";
  return out;
}

}  // namespace ht::cli
