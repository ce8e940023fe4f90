// Engine properties: the EP-overlap executor against independent oracles on tiny generated
// models. The HybridModel (a sequential implementation without ranks or plans) judges the
// executor; the sequential plan judges combined 1F1B; the flattened pattern judges the grouped
// one; delayed wgrad off judges on; EP = 1 judges EP = n within the reassociation bound; the
// uninterrupted run judges a checkpoint resume; and the MoE router is checked against the
// formulas of reference section 5.1 (top-k with lower-index tie-break, switch aux loss, z-loss).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>
#include <thread>

#include "engine_compare.hpp"
#include "ht/schedule/build.hpp"
#include "ht/engine/checkpoint.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/layers/moe.hpp"
#include "ht/engine/model.hpp"
#include "ht/patterns/symbols.hpp"
#include "ht/verify/engine_checks.hpp"
#include "ht/verify/plan_gen.hpp"
#include "property_groups.hpp"

namespace ht::verify {
namespace {

using engine::exec::Executor;
using engine::exec::ExecutorOptions;
using gen::EngineCase;

Case engine_case_json(const EngineCase& c) {
  const auto& m = c.model;
  return {{"pattern", c.pattern},
          {"ep", c.ep},
          {"microbatches", c.microbatches},
          {"batch", c.batch},
          {"seq", c.seq},
          {"data_seed", c.data_seed},
          {"weight_seed", c.weight_seed},
          {"model",
           {{"hidden", m.hidden},
            {"num_kv_heads", m.num_kv_heads},
            {"window", m.window},
            {"num_experts", m.num_experts},
            {"moe_topk", m.moe_topk},
            {"moe_shared_ffn_hidden", m.moe_shared_ffn_hidden}}}};
}

EngineCase engine_case_of(const Case& j) {
  EngineCase c;
  c.pattern = j.at("pattern").get<std::string>();
  c.ep = j.at("ep").get<int>();
  c.microbatches = j.at("microbatches").get<int>();
  c.batch = j.at("batch").get<int>();
  c.seq = j.at("seq").get<int>();
  c.data_seed = j.at("data_seed").get<std::uint64_t>();
  c.weight_seed = j.at("weight_seed").get<std::uint64_t>();
  c.model = gen::tiny_model_base();
  const Case& m = j.at("model");
  c.model.hidden = m.at("hidden").get<int>();
  c.model.num_kv_heads = m.at("num_kv_heads").get<int>();
  c.model.window = m.at("window").get<int>();
  c.model.num_experts = m.at("num_experts").get<int>();
  c.model.moe_topk = m.at("moe_topk").get<int>();
  c.model.moe_shared_ffn_hidden = m.at("moe_shared_ffn_hidden").get<int>();
  return c;
}

bool has_moe(const patterns::ParsedPattern& p) { return p.flattened_symbols().find('E') != std::string::npos; }

// EP for the properties that need EP > 1 (overlap): the case's, at least 2.
int overlap_ep(const EngineCase& c) { return std::max(2, c.ep); }

}  // namespace

void check_engine_matches_model(const Case& j, const ExecutorOptions& under_test) {
  const EngineCase c = engine_case_of(j);
  const auto p = patterns::parse(c.pattern);
  const auto batches = detail::batches_for(c, 1, 1);
  Executor ex(p, c.model, c.weight_seed, detail::plan_for(p, c, 1, 1, false, false), under_test);
  const auto res = ex.step(batches);
  engine::HybridModel<float> model(p, c.model, c.weight_seed);
  const auto loss = model.forward(batches[0][0]);
  model.backward();
  if (res.total != loss.total)
    fail("executor loss " + std::to_string(res.total) + " != HybridModel loss " + std::to_string(loss.total));
  auto params = ex.parameters(0);
  auto ref = model.parameters();
  if (params.size() != ref.size()) fail("executor and HybridModel have different parameter lists");
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].canonical != ref[i].canonical) fail("parameter order differs at " + ref[i].canonical);
    const auto& a = *params[i].grad;
    const auto& b = *ref[i].grad;
    if (a.shape != b.shape || std::memcmp(a.data.data(), b.data.data(), a.size() * sizeof(float)) != 0)
      fail("gradient of " + ref[i].canonical + " differs from the HybridModel's");
  }
}

void check_engine_overlap_vs_sequential(const Case& j, const ExecutorOptions& under_test) {
  const EngineCase c = engine_case_of(j);
  const auto p = patterns::parse(c.pattern);
  const int ep = overlap_ep(c);
  const auto batches = detail::batches_for(c, ep, c.microbatches);
  Executor seq(p, c.model, c.weight_seed, detail::plan_for(p, c, ep, c.microbatches, false, false));
  Executor ovl(p, c.model, c.weight_seed, detail::plan_for(p, c, ep, c.microbatches, true, false), under_test);
  const auto a = seq.step(batches);
  const auto b = ovl.step(batches);
  detail::expect_same_losses(a, b, "combined 1F1B vs sequential");
  detail::expect_same_tensors(seq, ovl, true, "combined 1F1B vs sequential");
  // After the all-reduce every rank holds the same non-expert gradients.
  auto r0 = ovl.parameters(0);
  for (int r = 1; r < ovl.ranks(); ++r) {
    auto rr = ovl.parameters(r);
    for (std::size_t i = 0; i < r0.size(); ++i) {
      if (r0[i].canonical.find("local_experts") != std::string::npos) continue;
      if (std::memcmp(r0[i].grad->data.data(), rr[i].grad->data.data(), r0[i].grad->size() * sizeof(float)) != 0)
        fail("non-expert gradient " + r0[i].canonical + " differs between rank 0 and rank " + std::to_string(r));
    }
  }
}

void check_engine_delay_wgrad(const Case& j, const ExecutorOptions& under_test) {
  const EngineCase c = engine_case_of(j);
  const auto p = patterns::parse(c.pattern);
  const int ep = overlap_ep(c);
  const auto batches = detail::batches_for(c, ep, c.microbatches);
  Executor on(p, c.model, c.weight_seed, detail::plan_for(p, c, ep, c.microbatches, true, true), under_test);
  Executor off(p, c.model, c.weight_seed, detail::plan_for(p, c, ep, c.microbatches, true, false));
  const auto a = on.step(batches);
  const auto b = off.step(batches);
  detail::expect_same_losses(a, b, "delayed wgrad on vs off");
  detail::expect_same_tensors(on, off, true, "delayed wgrad on vs off");
}

namespace {

void check_matches_model(const Case& j) { check_engine_matches_model(j, {}); }
void check_overlap_vs_sequential(const Case& j) { check_engine_overlap_vs_sequential(j, {}); }

void check_grouped_vs_flattened(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto grouped = patterns::parse(c.pattern);
  const auto flat = patterns::flatten(grouped);
  const bool overlap = c.ep > 1 && gen::overlap_allowed(grouped);
  const auto batches = detail::batches_for(c, c.ep, c.microbatches);
  Executor g(grouped, c.model, c.weight_seed, detail::plan_for(grouped, c, c.ep, c.microbatches, overlap, overlap));
  Executor f(flat, c.model, c.weight_seed, detail::plan_for(flat, c, c.ep, c.microbatches, overlap, overlap));
  const auto a = g.step(batches);
  const auto b = f.step(batches);
  detail::expect_same_losses(a, b, "grouped vs flattened");
  detail::expect_same_tensors(g, f, true, "grouped vs flattened");
}

void check_delay_wgrad(const Case& j) { check_engine_delay_wgrad(j, {}); }

// EP = n over n ranks against EP = 1 running the same microbatches one after the other. The
// terms are the same, the association differs (per-rank sums, then the all-reduce; each
// expert's GEMM over all sources at once), so equality holds within K u max|g| per element
// (K terms, u = 2^-24), as in `hybrid-twin verify`.
void check_ep_invariance(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto p = patterns::parse(c.pattern);
  const int ep = overlap_ep(c);
  const auto data = detail::batches_for(c, ep, c.microbatches);
  Executor a(p, c.model, c.weight_seed, detail::plan_for(p, c, ep, c.microbatches, false, false));
  Executor b(p, c.model, c.weight_seed, detail::plan_for(p, c, 1, ep * c.microbatches, false, false));
  std::vector<std::vector<engine::Batch>> one(1);
  for (const auto& rank : data)
    for (const auto& mb : rank) one[0].push_back(mb);
  const auto ra = a.step(data);
  const auto rb = b.step(one);
  const auto d = detail::compare_owned(a, b, true);
  const double k_terms = static_cast<double>(ep) * c.microbatches * c.batch * c.seq;
  const double bound = k_terms * std::ldexp(1.0, -24) * std::max(d.max_ref, 1e-30);
  if (!(d.max_abs <= bound))
    fail("EP = " + std::to_string(ep) + " gradients differ from EP = 1 by " + std::to_string(d.max_abs) +
         ", bound " + std::to_string(bound));
  const double loss_bound = k_terms * std::ldexp(1.0, -24) * std::max(std::fabs(rb.total), 1e-30);
  if (!(std::fabs(ra.total - rb.total) <= loss_bound))
    fail("EP = " + std::to_string(ep) + " loss " + std::to_string(ra.total) + " differs from EP = 1 loss " +
         std::to_string(rb.total));
}

// The same pattern cut into two pipeline stages at a place the seed picks (an empty last stage
// when there is one item): PP = 2 (1F1B, with the case's EP) must equal PP = 1 bit for bit --
// losses, and every gradient compared owner to owner, since a layer's gradients accumulate over
// the same microbatches in the same order on its one stage.
void check_pp_invariance(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto whole = patterns::parse(c.pattern);
  std::vector<std::size_t> cuts;  // top-level positions between items
  int depth = 0;
  for (std::size_t i = 0; i < c.pattern.size(); ++i) {
    if (c.pattern[i] == '[') ++depth;
    if (c.pattern[i] == ']') --depth;
    if (depth == 0 && i + 1 < c.pattern.size()) cuts.push_back(i + 1);
  }
  const std::size_t at = cuts.empty() ? c.pattern.size() : cuts[c.weight_seed % cuts.size()];
  const std::string piped = c.pattern.substr(0, at) + "|" + c.pattern.substr(at);
  const auto staged = patterns::parse(piped);
  schedule::ParallelConfig pc;
  pc.ep = c.ep;
  pc.dp = c.ep;
  pc.pp = 2;
  pc.microbatches = c.microbatches;
  const auto batches = detail::batches_for(c, c.ep, c.microbatches);
  Executor a(staged, c.model, c.weight_seed,
             schedule::build_plan(staged, engine::exec::schedule_dims(c.model, c.batch, c.seq), pc, {}));
  Executor b(whole, c.model, c.weight_seed, detail::plan_for(whole, c, c.ep, c.microbatches, false, false));
  const auto ra = a.step(batches);
  const auto rb = b.step(batches);
  detail::expect_same_losses(ra, rb, "PP = 2 ('" + piped + "') vs PP = 1");
  const auto d = detail::compare_owned(a, b, true);
  if (!d.bitwise)
    fail("PP = 2 ('" + piped + "') gradient " + d.first_differing + " differs from PP = 1 by " + std::to_string(d.max_abs));
}

// A checkpoint of the grouped model (logical keys, final_layernorm) loads into its flattened form
// (physical keys, final_norm) and vice versa: the loaded model, built from another seed so every
// value must come from the file, gives the same loss, logits and gradients bit for bit.
void check_checkpoint_load(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto grouped = patterns::parse(c.pattern);
  const auto flat = patterns::flatten(grouped);
  const engine::Batch batch = detail::batches_for(c, 1, 1).at(0).at(0);
  for (int direction = 0; direction < 2; ++direction) {
    const auto& from = direction == 0 ? grouped : flat;
    const auto& to = direction == 0 ? flat : grouped;
    const std::string what = "'" + from.text + "' checkpoint loaded into '" + to.text + "'";
    engine::HybridModel<float> src(from, c.model, c.weight_seed);
    engine::HybridModel<float> dst(to, c.model, c.weight_seed + 1);
    std::ostringstream name;
    name << "hybrid-twin-fuzz-ckpt-" << std::this_thread::get_id() << "-" << c.weight_seed << "-" << direction;
    const auto dir = std::filesystem::temp_directory_path() / name.str();
    try {
      engine::save_checkpoint(dir.string(), src, nullptr, 0, c.weight_seed);
      engine::load_checkpoint(dir.string(), dst, nullptr);
    } catch (...) {
      std::filesystem::remove_all(dir);
      throw;
    }
    std::filesystem::remove_all(dir);
    const double la = src.forward(batch).total;
    const double lb = dst.forward(batch).total;
    if (std::memcmp(&la, &lb, sizeof la) != 0)
      fail(what + ": loss " + std::to_string(lb) + " differs from " + std::to_string(la));
    const auto& xa = src.logits();
    const auto& xb = dst.logits();
    if (xa.shape != xb.shape || std::memcmp(xa.data.data(), xb.data.data(), xa.size() * sizeof(float)) != 0)
      fail(what + ": logits differ");
    src.zero_grad();
    dst.zero_grad();
    src.forward(batch);
    dst.forward(batch);
    src.backward();
    dst.backward();
    std::map<std::string, const engine::Tensor<float>*> grads;
    for (auto& p : dst.parameters()) grads[p.canonical] = p.grad;
    for (auto& p : src.parameters()) {
      const auto it = grads.find(p.canonical);
      if (it == grads.end()) fail(what + ": no parameter " + p.canonical + " after loading");
      const auto& g = *it->second;
      if (g.shape != p.grad->shape || std::memcmp(g.data.data(), p.grad->data.data(), g.size() * sizeof(float)) != 0)
        fail(what + ": gradient of " + p.canonical + " differs");
    }
  }
}

// Two steps of the grouped run (overlapped where the pattern allows it; hybrid MTP never, rule
// O3), saved; the sequential flattened run (other seed: everything must come from the file)
// resumes it and the third step gives the same parameters.
void check_checkpoint_resume(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto grouped = patterns::parse(c.pattern);
  const auto flat = patterns::flatten(grouped);
  const bool overlap = c.ep > 1 && gen::overlap_allowed(grouped);
  engine::AdamWConfig opt;
  opt.lr = 1e-2f;
  Executor a(grouped, c.model, c.weight_seed, detail::plan_for(grouped, c, c.ep, c.microbatches, overlap, overlap));
  for (int s = 0; s < 2; ++s) {
    a.zero_grad();
    a.step(detail::batches_for(c, c.ep, c.microbatches, 100 + static_cast<std::uint64_t>(s)));
    a.optimizer_step(opt);
  }
  std::ostringstream name;
  name << "hybrid-twin-fuzz-" << std::this_thread::get_id() << "-" << c.weight_seed << ".safetensors";
  const auto path = (std::filesystem::temp_directory_path() / name.str()).string();
  a.save(path);
  Executor b(flat, c.model, c.weight_seed + 1, detail::plan_for(flat, c, c.ep, c.microbatches, false, false));
  try {
    b.load(path);
  } catch (...) {
    std::remove(path.c_str());
    throw;
  }
  std::remove(path.c_str());
  if (b.optimizer_steps() != 2) fail("the resumed run counts " + std::to_string(b.optimizer_steps()) + " steps");
  const auto next = detail::batches_for(c, c.ep, c.microbatches, 102);
  a.zero_grad();
  b.zero_grad();
  const auto ra = a.step(next);
  const auto rb = b.step(next);
  detail::expect_same_losses(ra, rb, "resumed vs uninterrupted");
  a.optimizer_step(opt);
  b.optimizer_step(opt);
  // Each rank holds only its own experts' state: compare every owned parameter with its owner.
  const auto d = detail::compare_owned(a, b, false);
  if (!d.bitwise) fail("resumed vs uninterrupted: parameter " + d.first_differing + " differs after the next step");
}

// ---- the CUDA code path: one rank of the device executor on the host emulation of the device ----

// One forward and backward on the device: the loss and the gradients by canonical name.
std::pair<double, std::map<std::string, engine::Tensor<float>>> device_run(const patterns::ParsedPattern& p,
                                                                           const EngineCase& c,
                                                                           const engine::Batch& batch) {
  auto ex = engine::cuda::make_host_executor(
      p, c.model, c.weight_seed,
      engine::exec::ep_plan(p, c.model, batch.tokens.dim(0), batch.tokens.dim(1), 1, 1, false, false));
  ex->zero_grad();
  const double loss = ex->step({{batch}}).total;
  std::map<std::string, engine::Tensor<float>> grads;
  for (auto& q : ex->parameters(0)) grads[q.canonical] = *q.grad;
  return {loss, grads};
}

void check_device_grouped_vs_flattened(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto grouped = patterns::parse(c.pattern);
  const auto flat = patterns::flatten(grouped);
  const engine::Batch batch = detail::batches_for(c, 1, 1).at(0).at(0);
  const auto [la, ga] = device_run(grouped, c, batch);
  const auto [lb, gb] = device_run(flat, c, batch);
  if (std::memcmp(&la, &lb, sizeof la) != 0)
    fail("device model: loss of '" + grouped.text + "' " + std::to_string(la) + " differs from '" + flat.text + "' " +
         std::to_string(lb));
  for (const auto& [name, g] : ga) {
    const auto it = gb.find(name);
    if (it == gb.end() || it->second.shape != g.shape ||
        std::memcmp(it->second.data.data(), g.data.data(), g.size() * sizeof(float)) != 0)
      fail("device model: gradient of " + name + " differs between grouped and flattened");
  }
}

// Bitwise where every layer's device code rounds like the CPU's on the host (all but SwiGLU, whose
// CPU exp is Eigen's vectorised one: '-' and 'E'), else within the float32 bound of
// layer_compare.hpp against a float64 HybridModel.
void check_device_matches_model(const Case& j) {
  const EngineCase c = engine_case_of(j);
  const auto p = patterns::parse(c.pattern);
  const engine::Batch batch = detail::batches_for(c, 1, 1).at(0).at(0);
  const auto row =
      engine::cuda::compare_device_to_cpu(engine::cuda::make_host_executor, p, c.model, batch, c.weight_seed);
  std::string all = p.flattened_symbols();
  for (int d = 0; d < p.mtp_depths; ++d) all += p.mtp;
  const bool swiglu = all.find_first_of("-E") != std::string::npos;
  if (!row.pass) fail("device model vs HybridModel: " + row.note);
  if (!swiglu && !row.bitwise)
    fail("device model vs HybridModel: not bitwise without SwiGLU layers (max diff " + std::to_string(row.max_abs_diff) + ")");
}

// ---- the router against reference section 5.1 -------------------------------------------------

void check_router(const Case& j) {
  const int n = j.at("tokens").get<int>(), e = j.at("experts").get<int>(), k = j.at("topk").get<int>();
  const int c = j.at("hidden").get<int>();
  const double scale = j.at("loss_scale").get<double>();
  const auto xs = j.at("x").get<std::vector<int>>();
  const auto ws = j.at("router").get<std::vector<int>>();
  engine::ModelConfig cfg;
  cfg.hidden = c;
  cfg.num_experts = e;
  cfg.moe_topk = k;
  engine::MoeParams<double> p;
  p.router = engine::Tensor<double>({e, c});
  for (std::size_t i = 0; i < ws.size(); ++i) p.router.data[i] = ws[i];
  std::vector<double> x(xs.begin(), xs.end());
  engine::MoeRouting<double> r;
  std::vector<double> permuted;
  engine::moe_route_permute<double>(cfg, p, x.data(), n, scale, r, permuted);

  // Integer inputs give exact integer logits, so ties are real ties.
  std::vector<std::vector<double>> logits(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(e)));
  for (int t = 0; t < n; ++t)
    for (int ex = 0; ex < e; ++ex) {
      double s = 0;
      for (int d = 0; d < c; ++d) s += x[static_cast<std::size_t>(t * c + d)] * ws[static_cast<std::size_t>(ex * c + d)];
      logits[static_cast<std::size_t>(t)][static_cast<std::size_t>(ex)] = s;
    }
  std::vector<int> tokens(static_cast<std::size_t>(e), 0);
  double aux_sum = 0, z_sum = 0;
  std::vector<double> col(static_cast<std::size_t>(e), 0.0);
  for (int t = 0; t < n; ++t) {
    const auto& lg = logits[static_cast<std::size_t>(t)];
    std::vector<int> order(static_cast<std::size_t>(e));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return lg[static_cast<std::size_t>(a)] > lg[static_cast<std::size_t>(b)]; });
    double sel_max = lg[static_cast<std::size_t>(order[0])], sel_sum = 0;
    for (int q = 0; q < k; ++q) sel_sum += std::exp(lg[static_cast<std::size_t>(order[static_cast<std::size_t>(q)])] - sel_max);
    for (int q = 0; q < k; ++q) {
      const int want = order[static_cast<std::size_t>(q)];
      const int got = r.topk_idx[static_cast<std::size_t>(t * k + q)];
      if (got != want)
        fail("token " + std::to_string(t) + " slot " + std::to_string(q) + " routed to expert " + std::to_string(got) +
             ", expected " + std::to_string(want) + " (descending logit, ties to the lower index)");
      const double w = std::exp(lg[static_cast<std::size_t>(want)] - sel_max) / sel_sum;
      if (std::fabs(r.topk_w[static_cast<std::size_t>(t * k + q)] - w) > 1e-12)
        fail("combine weight of token " + std::to_string(t) + " slot " + std::to_string(q) + " is not the softmax of the selected logits");
      ++tokens[static_cast<std::size_t>(want)];
    }
    const double m = *std::max_element(lg.begin(), lg.end());
    double s = 0;
    for (double v : lg) s += std::exp(v - m);
    const double lse = m + std::log(s);
    z_sum += lse * lse;
    for (int ex = 0; ex < e; ++ex) col[static_cast<std::size_t>(ex)] += std::exp(lg[static_cast<std::size_t>(ex)] - lse);
  }
  if (r.tokens_per_expert != tokens) fail("tokens_per_expert differs from the top-k selection");
  for (int ex = 0; ex < e; ++ex) aux_sum += col[static_cast<std::size_t>(ex)] * tokens[static_cast<std::size_t>(ex)];
  const double nn = n;
  const double aux = scale * e * static_cast<double>(cfg.moe_aux_loss_coeff) / (k * nn * nn) * aux_sum;
  const double z = scale * static_cast<double>(cfg.moe_z_loss_coeff) * z_sum / nn;
  const auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1e-12, std::fabs(b)); };
  if (!near(r.aux_loss, aux))
    fail("aux loss " + std::to_string(r.aux_loss) + ", expected s E coeff / (k N^2) sum_i P_i tokens_i = " + std::to_string(aux));
  if (!near(r.z_loss, z)) fail("z-loss " + std::to_string(r.z_loss) + ", expected " + std::to_string(z));
  // Permutation: expert-major, tokens in order within an expert.
  int row = 0;
  for (int ex = 0; ex < e; ++ex) {
    if (r.expert_offset[static_cast<std::size_t>(ex)] != row) fail("expert_offset of expert " + std::to_string(ex) + " is wrong");
    for (int t = 0; t < n; ++t)
      for (int q = 0; q < k; ++q)
        if (r.topk_idx[static_cast<std::size_t>(t * k + q)] == ex) {
          if (r.perm_row[static_cast<std::size_t>(t * k + q)] != row || r.row_token[static_cast<std::size_t>(row)] != t)
            fail("permuted row " + std::to_string(row) + " is not token " + std::to_string(t) + " of expert " + std::to_string(ex));
          ++row;
        }
  }
}

CaseSource router_cases(const FuzzContext&) {
  return {rc::gen::exec([] {
            const int n = *rc::gen::inRange(1, 13), e = *rc::gen::inRange(2, 9), c = *rc::gen::inRange(1, 5);
            const int k = *rc::gen::inRange(1, std::min(e, 3) + 1);
            const auto x = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n * c), rc::gen::inRange(-2, 3));
            const auto w = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(e * c), rc::gen::inRange(-1, 2));
            return Case{{"tokens", n}, {"experts", e}, {"topk", k}, {"hidden", c}, {"loss_scale", *rc::gen::element(1.0, 0.5)},
                        {"x", x}, {"router", w}};
          }),
          ""};
}

// ---- case sources ------------------------------------------------------------------------------

// Why a fixed pattern cannot run on the CPU executor, or "" when it can (pipes are dropped: the
// executor runs PP = 1, so the segments run as one stage).
std::string engine_unsupported(const patterns::ParsedPattern& p, bool needs_overlap, bool allow_mtp) {
  if (p.mtp_depths > 0) {
    if (!allow_mtp) return "the property runs schedules hybrid MTP cannot use (the overlap, rule O3, or pp > 1)";
    const auto last = p.mtp.find_first_of("-E");
    if (last != std::string::npos && last + 1 != p.mtp.size())
      return "the executor runs an MTP depth as one layer plan, which needs its MLP/MoE last";
    for (char s : p.mtp)
      if (!patterns::find_symbol(s)->engine_supported) return std::string("the engine does not implement '") + s + "'";
  }
  if (!p.has_main()) return "the pattern has no main part";
  for (char s : p.flattened_symbols())
    if (!patterns::find_symbol(s)->engine_supported) return std::string("the engine does not implement '") + s + "'";
  if (needs_overlap && !gen::overlap_allowed(p)) return "the pattern cannot run the EP overlap (rule O1)";
  if (needs_overlap && !has_moe(p)) return "the pattern has no MoE layer to overlap";
  return "";
}

// `allow_mtp`: the property's schedules are ones hybrid MTP may use (sequential, PP = 1), so
// generated patterns sometimes carry MTP depths and fixed ones keep theirs.
std::function<CaseSource(const FuzzContext&)> engine_cases(bool needs_overlap, bool allow_mtp = false) {
  return [needs_overlap, allow_mtp](const FuzzContext& ctx) -> CaseSource {
    rc::Gen<std::string> patterns_gen = allow_mtp ? gen::engine_pattern_with_mtp() : gen::engine_pattern(needs_overlap);
    if (ctx.pattern) {
      const auto p = patterns::parse(*ctx.pattern);
      const std::string why = engine_unsupported(p, needs_overlap, allow_mtp);
      if (!why.empty()) return {std::nullopt, why};
      std::string text = p.main;
      text.erase(std::remove(text.begin(), text.end(), '|'), text.end());
      for (int d = 0; d < p.mtp_depths; ++d) text += "/" + p.mtp;
      patterns_gen = rc::gen::just(text);
    }
    return {rc::gen::map(gen::engine_case(patterns_gen), engine_case_json), ""};
  };
}

Property make(std::string name, std::string summary, std::function<CaseSource(const FuzzContext&)> cases,
              std::function<void(const Case&)> check) {
  return Property{std::move(name), "engine", std::move(summary), std::move(cases), std::move(check)};
}

}  // namespace

namespace detail {

void add_engine_properties(std::vector<Property>& out) {
  out.push_back(make("engine.matches_model", "executor (EP 1, one microbatch) == HybridModel: loss and gradients bitwise",
                     engine_cases(false, true), check_matches_model));
  out.push_back(make("engine.grouped_vs_flattened", "grouped pattern == flattened pattern: losses and gradients bitwise",
                     engine_cases(false, true), check_grouped_vs_flattened));
  out.push_back(make("engine.overlap_vs_sequential",
                     "combined 1F1B == sequential: losses and gradients bitwise, all-reduced gradients equal on all ranks",
                     engine_cases(true), check_overlap_vs_sequential));
  out.push_back(make("engine.delay_wgrad", "delayed weight gradients on == off: losses and gradients bitwise",
                     engine_cases(true), check_delay_wgrad));
  out.push_back(make("engine.ep_invariance", "EP = n == EP = 1 within the float32 reassociation bound",
                     engine_cases(false, true), check_ep_invariance));
  out.push_back(make("engine.pp_invariance", "PP = 2 (pattern cut at a random item) == PP = 1: losses and gradients bitwise",
                     engine_cases(false), check_pp_invariance));
  out.push_back(make("engine.checkpoint_load",
                     "grouped checkpoint -> flattened model and back: loss, logits and gradients bitwise",
                     engine_cases(false, true), check_checkpoint_load));
  out.push_back(make("engine.checkpoint_resume",
                     "a checkpoint of the grouped run (overlapped unless MTP) resumes the sequential flattened run "
                     "bitwise",
                     engine_cases(false, true), check_checkpoint_resume));
  out.push_back(make("engine.device_grouped_vs_flattened",
                     "the CUDA code path (host emulation): grouped == flattened device model, losses and gradients bitwise",
                     engine_cases(false, true), check_device_grouped_vs_flattened));
  out.push_back(make("engine.device_matches_model",
                     "the CUDA code path (host emulation) == HybridModel: bitwise without SwiGLU, else the float32 bound",
                     engine_cases(false, true), check_device_matches_model));
  out.push_back(make("engine.router", "top-k (ties to the lower index), combine weights, aux and z losses per reference 5.1",
                     router_cases, check_router));
}

}  // namespace detail
}  // namespace ht::verify
