// The EP-overlap executor on a device (engine/cuda/include/ht/engine/cuda/dev/executor.hpp) on the
// host emulation: combined 1F1B against the sequential plan and grouped against flattened, bit for
// bit; against the CPU executor (a second implementation of the same plan) bitwise without SwiGLU
// and within the stated bound with it; a dropped residual gradient is caught; its timeline names
// the plan's nodes; bad plans and deadlocking issue orders are refused in one line.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "ht/engine/cuda/dev/host.hpp"
#include "ht/engine/cuda/device_executor.hpp"
#include "ht/engine/error.hpp"
#include "ht/patterns/pattern.hpp"
#include "ht/schedule/build.hpp"
#include "../exec/wgrad_work.hpp"
#include "split_compare.hpp"

using namespace ht::engine;
namespace pat = ht::patterns;

namespace {

const ModelConfig& cfg() {
  static const ModelConfig c = cuda::model_check_config();
  return c;
}

std::unique_ptr<cuda::DeviceExecutor> host_ex(const std::string& text, const ht::schedule::Plan& plan,
                                              cuda::DeviceExecutorOptions o = {}) {
  return cuda::make_host_executor(pat::parse(text), cfg(), 5, plan, o);
}
ht::schedule::Plan plan_of(const std::string& text, int ep, int mbs, bool overlap, bool delay) {
  return exec::ep_plan(pat::parse(text), cfg(), 2, 6, ep, mbs, overlap, delay);
}

// The oracle of the clipping norm: every canonical name once (replicas hold equal copies), from an
// owner, summed by name (another order than the executors').
double oracle_norm(cuda::DeviceExecutor& ex) {
  std::map<std::string, double> by_name;
  for (int r = 0; r < ex.ranks(); ++r)
    for (const auto& p : ex.parameters(r))
      if (ex.owns(r, p.canonical)) {
        double ss = 0;
        for (float g : p.grad->data) ss += static_cast<double>(g) * g;
        by_name[p.canonical] = ss;
      }
  double sum = 0;
  for (const auto& [name, ss] : by_name) sum += ss;
  return std::sqrt(sum);
}

}  // namespace

TEST_CASE("device executor rows (host emulation): overlap == sequential and grouped == flattened bitwise, CPU "
          "executor matched", "[engine][dev-executor]") {
  const auto rows = cuda::compare_executors(cuda::make_host_executor, 3, cuda::make_host_fabric);
  std::multiset<std::string> pairs;
  for (const auto& r : rows) {
    INFO(r.pair << " " << r.config << ": " << r.note);
    pairs.insert(r.pair);
    CHECK(r.pass);
    if (r.pair != "cpu_vs_device_executor") CHECK(r.bitwise);
  }
  CHECK(pairs.count("device_overlap_vs_sequential") == 2);
  CHECK(pairs.count("device_executor_grouped_vs_flattened") == 2);
  CHECK(pairs.count("device_executor_devices_vs_one") == 1);
  CHECK(pairs.count("cpu_vs_device_executor") == 2);
  // On the host emulation only SwiGLU's exp differs from the CPU: the dense row is bitwise, and the
  // MoE row differs by rounding only (not zero, far under its bound).
  for (const auto& r : rows) {
    if (r.pair == "cpu_vs_device_executor" && r.config == "[MG]*") CHECK(r.bitwise);
    if (r.pair == "cpu_vs_device_executor" && r.config == "M[*E]-") {
      CHECK(r.max_abs_diff > 0);
      CHECK(r.max_abs_diff < 1e-5);
    }
  }
}

TEST_CASE("device executor: EP 4 overlapped with delayed wgrad equals sequential bit for bit",
          "[engine][dev-executor]") {
  const std::string text = "[*E]M[*E]";
  const auto batches = exec::random_batches(4, 2, 2, 6, cfg().vocab_size, 9);
  auto seq = host_ex(text, plan_of(text, 4, 2, false, false));
  auto ovl = host_ex(text, plan_of(text, 4, 2, true, true));
  const auto rs = seq->step(batches), ro = ovl->step(batches);
  CHECK(rs.loss == ro.loss);
  const auto d = exec::compare_owned(cuda::owned(*ovl), cuda::owned(*seq), true);
  CHECK(d.missing.empty());
  CHECK(d.bitwise);
  CHECK(d.max_ref > 0);
  // Gradients accumulate over steps and zero_grad clears them.
  ovl->zero_grad();
  for (auto& p : ovl->parameters(1))
    for (float g : p.grad->data) REQUIRE(g == 0.0f);
}

TEST_CASE("device executor: a dropped residual gradient at the combine is caught", "[engine][dev-executor]") {
  const std::string text = "M[*E]-";
  const auto plan = plan_of(text, 2, 2, true, false);
  const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 4);
  auto good = host_ex(text, plan);
  cuda::DeviceExecutorOptions o;
  o.test_drop_residual_grad = true;
  auto bad = host_ex(text, plan, o);
  good->step(batches);
  bad->step(batches);
  const auto d = exec::compare_owned(cuda::owned(*bad), cuda::owned(*good), true);
  CHECK_FALSE(d.bitwise);
  CHECK(d.max_abs > 1e-3 * d.max_ref);  // of the order of the gradients, far above any rounding
}

TEST_CASE("device executor (host emulation): with delayed wgrad the W nodes run the weight-gradient GEMMs the twin "
          "prices them at, moved out of the backward, bits unchanged",
          "[engine][dev-executor][wgrad]") {
  const std::string text = "M[*E]M[*E]-";  // cfg() has a shared expert: its W is pre_dispatch's
  const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 11);
  auto on = host_ex(text, plan_of(text, 2, 2, true, true)), off = host_ex(text, plan_of(text, 2, 2, true, false));
  const auto ron = on->step(batches), roff = off->step(batches);
  CHECK(ron.loss == roff.loss);
  const auto d = exec::compare_owned(cuda::owned(*on), cuda::owned(*off), true);
  CHECK(d.bitwise);
  CHECK(d.max_ref > 0);
  const auto work = ht::test::check_weight_work(on->plan(), ron.timeline, off->plan(), roff.timeline,
                                                exec::schedule_dims(cfg(), 2, 6), cfg().num_experts / 2);
  INFO("backward " << work.backward << ", W " << work.weight);
  CHECK(work.weight > 0.3 * (work.backward + work.weight));
}

TEST_CASE("device executor: a W node run twice, never, or before its backward fails the step naming it",
          "[engine][dev-executor][wgrad]") {
  const std::string text = "[*E]M-";
  const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 12);
  const std::pair<exec::WeightFault, std::string> faults[] = {{exec::WeightFault::RunTwice, "ran twice"},
                                                              {exec::WeightFault::Skip, "never ran"},
                                                              {exec::WeightFault::BeforeBackward, "ran before its backward"}};
  for (const auto& [fault, message] : faults) {
    INFO(message);
    cuda::DeviceExecutorOptions o;
    o.test_weight_fault = fault;
    auto broken = host_ex(text, plan_of(text, 2, 2, true, true), o);
    CHECK_THROWS_WITH(broken->step(batches), Catch::Contains(message) && Catch::Contains("W node"));
  }
}

TEST_CASE("device executor timeline: one span per plan node, on its rank's compute or comm stream",
          "[engine][dev-executor]") {
  const std::string text = "M[*E]";
  const auto plan = plan_of(text, 2, 2, true, true);
  auto ex = host_ex(text, plan);
  const auto res = ex->step(exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 2));
  const auto& tl = res.timeline;
  REQUIRE(tl.spans.size() == plan.nodes.size());
  std::multiset<std::string> planned, traced;
  for (const auto& n : plan.nodes) planned.insert(n.label() + "@" + std::to_string(n.rank));
  for (const auto& s : tl.spans) {
    traced.insert(s.name + "@" + std::to_string(s.device));
    CHECK(s.duration_s >= 0);
    CHECK(s.start_s >= 0);
    CHECK((s.stream == 1) == (s.role == ht::traces::Role::Comm));
  }
  CHECK(planned == traced);
  CHECK(tl.streams.size() == 4);
  CHECK(res.total == Approx(res.loss[0][0] + res.loss[0][1] + res.loss[1][0] + res.loss[1][1]));
}

TEST_CASE("device executor: clipped AdamW steps give the CPU executor's losses and weights bit for bit without "
          "SwiGLU; with MoE, overlap stays equal to sequential and the norm sums each gradient once",
          "[engine][dev-executor]") {
  AdamWConfig opt;
  opt.clip_norm = 0.05f;  // below the gradients' norm: every step clips
  {
    const std::string text = "[MG]*";
    const auto plan = plan_of(text, 2, 2, true, true);
    auto dev = host_ex(text, plan);
    exec::Executor cpu(pat::parse(text), cfg(), 5, plan);
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 20 + step);
      dev->zero_grad();
      cpu.zero_grad();
      const auto rd = dev->step(batches), rc = cpu.step(batches);
      CHECK(rd.loss == rc.loss);
      const double nd = dev->optimizer_step(opt), nc = cpu.optimizer_step(opt);
      CHECK(nd == nc);
      CHECK(nd > opt.clip_norm);
      const auto d = exec::compare_owned(cuda::owned(*dev), exec::owned(cpu), false);
      CHECK(d.missing.empty());
      CHECK(d.bitwise);
    }
  }
  {
    const std::string text = "M[*E]-";
    auto seq = host_ex(text, plan_of(text, 2, 2, false, false));
    auto ovl = host_ex(text, plan_of(text, 2, 2, true, true));
    for (int step = 0; step < 3; ++step) {
      INFO("step " << step);
      const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 30 + step);
      seq->zero_grad();
      ovl->zero_grad();
      const auto rs = seq->step(batches), ro = ovl->step(batches);
      CHECK(rs.loss == ro.loss);
      const double oracle = oracle_norm(*ovl);
      const double ns = seq->optimizer_step(opt), no = ovl->optimizer_step(opt);
      CHECK(ns == no);
      CHECK(no == Approx(oracle).epsilon(1e-12));
      const auto d = exec::compare_owned(cuda::owned(*ovl), cuda::owned(*seq), false);
      CHECK(d.missing.empty());
      CHECK(d.bitwise);
    }
  }
}

TEST_CASE("device executor refuses plans it does not run and deadlocking issue orders", "[engine][dev-executor]") {
  const auto msg = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A plan of another pattern.
  CHECK_THAT(msg([] { host_ex("M*E", plan_of("M[*E]-", 2, 1, false, false)); }),
             Catch::Contains("plan was built for pattern"));
  // MTP depths under the EP overlap (a plan the builder refuses, rule O3).
  {
    auto plan = plan_of("*E/*E", 2, 1, false, false);
    plan.overlap = true;
    CHECK_THAT(msg([&] { host_ex("*E/*E", plan); }), Catch::Contains("O3"));
  }
  // Pipeline stages.
  {
    ht::schedule::ParallelConfig pc;
    pc.pp = 2;
    pc.microbatches = 2;
    const auto p = pat::parse("M*M*");
    const auto plan = ht::schedule::build_plan(p, exec::schedule_dims(cfg(), 2, 6), pc, {});
    CHECK_THAT(msg([&] { cuda::make_host_executor(p, cfg(), 1, plan); }), Catch::Contains("pp 1"));
  }
  // Experts that do not divide over the ranks (4 experts over 3 ranks): refused when the plan is built.
  CHECK_THAT(msg([] { host_ex("*E", plan_of("*E", 3, 1, false, false)); }), Catch::Contains("multiple of ep"));
  // Rank 1 issues two all-to-alls in the other order: they wait for each other forever.
  {
    auto plan = plan_of("*E", 2, 2, false, false);
    auto& issue = plan.ranks.at(1).issue;
    std::vector<std::size_t> comm;
    for (std::size_t i = 0; i < issue.size(); ++i)
      if (plan.node(issue[i]).collective >= 0 && plan.node(issue[i]).slot != ht::schedule::Slot::GradAllReduce)
        comm.push_back(i);
    REQUIRE(comm.size() >= 2);
    std::swap(issue[comm[0]], issue[comm[1]]);
    auto ex = host_ex("*E", plan);
    CHECK_THAT(msg([&] { ex->step(exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 1)); }), Catch::Contains("deadlock"));
  }
  // Batches of the wrong shape.
  auto ex = host_ex("*E", plan_of("*E", 2, 1, false, false));
  CHECK_THAT(msg([&] { ex->step(exec::random_batches(1, 1, 2, 6, cfg().vocab_size, 1)); }), Catch::Contains("ranks"));
  CHECK_THAT(msg([&] { ex->step(exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 1)); }),
             Catch::Contains("microbatches"));
}

namespace {

// A device executor that fails in step() on fabric endpoint `bad`: the others then wait at a
// transfer that never comes unless the fabric is aborted.
class FailsOn final : public cuda::DeviceExecutor {
 public:
  FailsOn(std::unique_ptr<cuda::DeviceExecutor> inner, bool fail) : inner_(std::move(inner)), fail_(fail) {}
  std::string device() const override { return inner_->device(); }
  int ranks() const override { return inner_->ranks(); }
  bool local(int r) const override { return inner_->local(r); }
  const ht::schedule::Plan& plan() const override { return inner_->plan(); }
  exec::StepResult step(const std::vector<std::vector<Batch>>& b) override {
    if (fail_) throw std::runtime_error("injected failure on one device");
    return inner_->step(b);
  }
  void zero_grad() override { inner_->zero_grad(); }
  double optimizer_step(const AdamWConfig& c) override { return inner_->optimizer_step(c); }
  std::vector<ParamRef<float>> parameters(int r) override { return inner_->parameters(r); }
  bool owns(int r, const std::string& n) const override { return inner_->owns(r, n); }
  AdamWState<float> optimizer_state(int r) override { return inner_->optimizer_state(r); }
  void restore(int r, const AdamWState<float>& s) override { inner_->restore(r, s); }

 private:
  std::unique_ptr<cuda::DeviceExecutor> inner_;
  bool fail_;
};

std::unique_ptr<cuda::DeviceExecutor> threads_ex(int devices, const std::string& text, const ht::schedule::Plan& plan,
                                                 cuda::DeviceExecutorOptions o = {}) {
  return cuda::make_multi_device_executor(cuda::make_host_executor, cuda::make_host_fabric(devices), pat::parse(text),
                                          cfg(), 5, plan, o);
}

}  // namespace

TEST_CASE("device executor driven as several devices by one process (a thread each) equals one device bit for bit",
          "[engine][dev-executor]") {
  struct Case {
    int devices;
    const char* pattern;
    int ep, mbs;
  };
  for (const Case c : {Case{2, "M[*E]M[*E]-", 2, 3}, Case{2, "[*E]M[*E]", 4, 4}, Case{4, "[*E]M[*E]", 4, 2}}) {
    INFO(c.devices << " devices, " << c.pattern << " EP " << c.ep);
    const auto plan = plan_of(c.pattern, c.ep, c.mbs, true, true);
    auto split = threads_ex(c.devices, c.pattern, plan);
    auto one = host_ex(c.pattern, plan);
    CHECK(split->device().find(std::to_string(c.devices) + " devices driven by one process (threads)") != std::string::npos);
    const auto differences = test::compare_split(*split, *one, c.ep, c.mbs, cfg().vocab_size, 50);
    for (const auto& d : differences) FAIL_CHECK(d);
    CHECK(differences.empty());
    // The joined timeline holds every rank's nodes, as one device's does.
    const auto batches = exec::random_batches(c.ep, c.mbs, 2, 6, cfg().vocab_size, 60);
    CHECK(split->step(batches).timeline.spans.size() == one->step(batches).timeline.spans.size());
  }
  SECTION("a dropped residual gradient on the devices is caught") {
    const auto plan = plan_of("M[*E]-", 2, 2, true, false);
    cuda::DeviceExecutorOptions bad_opts;
    bad_opts.test_drop_residual_grad = true;
    auto bad = threads_ex(2, "M[*E]-", plan, bad_opts);
    auto good = host_ex("M[*E]-", plan);
    const auto batches = exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 8);
    bad->step(batches);
    good->step(batches);
    const auto d = exec::compare_owned(cuda::owned(*bad), cuda::owned(*good), true);
    CHECK_FALSE(d.bitwise);
    CHECK(d.max_abs > 0);
  }
  SECTION("a split that does not divide the ranks is refused") {
    const auto plan = plan_of("M[*E]-", 2, 2, true, false);
    CHECK_THROWS_WITH(threads_ex(3, "M[*E]-", plan), Catch::Contains("3 processes do not divide the plan's 2 ranks"));
  }
  SECTION("one device failing mid-step stops the others instead of leaving them waiting") {
    const auto plan = plan_of("M[*E]-", 2, 2, true, false);
    const cuda::DeviceExecutorFactory make = [](const pat::ParsedPattern& p, const ModelConfig& c, std::uint64_t seed,
                                               ht::schedule::Plan pl, cuda::DeviceExecutorOptions o) {
      const bool fail = o.group->process() == 1;
      return std::make_unique<FailsOn>(cuda::make_host_executor(p, c, seed, std::move(pl), o), fail);
    };
    auto ex = cuda::make_multi_device_executor(make, cuda::make_host_fabric(2), pat::parse("M[*E]-"), cfg(), 5, plan);
    CHECK_THROWS_WITH(ex->step(exec::random_batches(2, 2, 2, 6, cfg().vocab_size, 9)),
                      Catch::Contains("injected failure on one device"));
  }
}

// Oracle: the emulated device's own byte count (dev::Host keeps every block's size). A layer's
// state lives from its first node to its last and a chunk's buffers to its last node, so a
// sequential plan holds one microbatch's state: going from 2 to 8 microbatches adds only their
// token and target uploads (2 x b x t ints per rank and microbatch), where keeping every
// microbatch's state to the end of the step (as before) added 6 more of everything else.
TEST_CASE("device executor memory: a sequential plan holds one microbatch's state whatever their number",
          "[engine][dev-executor][memory]") {
  const std::string text = "M[*E]-";
  const int ranks = 2, b = 2, t = 6;
  const auto peak = [&](int mbs, bool overlap) {
    const auto batches = exec::random_batches(ranks, mbs, b, t, cfg().vocab_size, 3);
    auto ex = host_ex(text, plan_of(text, ranks, mbs, overlap, overlap));
    const long long before = dev::Host::live_bytes();
    dev::Host::reset_peak();
    ex->step(batches);
    return dev::Host::peak_bytes() - before;
  };
  const long long tokens = 2LL * ranks * b * t * static_cast<long long>(sizeof(int));
  const long long two = peak(2, false), eight = peak(8, false);
  INFO("peak bytes: 2 microbatches " << two << ", 8 microbatches " << eight);
  CHECK(eight > two);
  CHECK(eight - two <= 6 * tokens);
  // Combined 1F1B keeps a second microbatch in flight, not all of them.
  const long long two_ovl = peak(2, true), eight_ovl = peak(8, true);
  INFO("overlapped: 2 microbatches " << two_ovl << ", 8 microbatches " << eight_ovl);
  CHECK(eight_ovl - two_ovl <= 6 * tokens);
}

// DP > EP: DP / EP groups of EP consecutive ranks each hold the experts once and exchange tokens
// within the group; the copies of an expert sum their gradients (the plan's expert all-reduce).
// Oracles: the CPU executor on the same plan (bitwise without SwiGLU, as above; within the
// rounding of SwiGLU's exp with it), the sequential plan for the overlapped one, and the norm by
// canonical name.
TEST_CASE("device executor: DP > EP equals the CPU executor, replicas of an expert stay equal",
          "[engine][dev-executor]") {
  AdamWConfig opt;
  opt.clip_norm = 0.05f;
  for (const auto& [text, dp, ep] :
       {std::tuple{"[MG]*", 2, 1}, std::tuple{"M[*E]-", 4, 2}, std::tuple{"M[*E]-", 2, 1}}) {
    INFO(text << " dp " << dp << " ep " << ep);
    const auto plan = [&](bool overlap) {  // overlap needs EP > 1 (rule O7)
      return exec::ep_plan(pat::parse(text), cfg(), 2, 6, ep, 2, overlap && ep > 1, overlap && ep > 1, dp);
    };
    auto dev = host_ex(text, plan(true));
    auto seq = host_ex(text, plan(false));
    exec::Executor cpu(pat::parse(text), cfg(), 5, plan(true));
    const bool moe = pat::parse(text).has_moe();
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const auto batches = exec::random_batches(dp, 2, 2, 6, cfg().vocab_size, 40 + step);
      for (auto* z : {dev.get(), seq.get()}) z->zero_grad();
      cpu.zero_grad();
      const auto rd = dev->step(batches), rs = seq->step(batches), rc = cpu.step(batches);
      CHECK(rd.loss == rs.loss);
      if (!moe) CHECK(rd.loss == rc.loss);
      CHECK(std::fabs(rd.total - rc.total) <= 1e-5 * std::fabs(rc.total));
      for (int r = ep; r < dp; ++r) {  // rank r holds rank r - ep's experts
        const auto mine = dev->parameters(r), theirs = dev->parameters(r - ep);
        for (std::size_t i = 0; i < mine.size(); ++i)
          CHECK(std::memcmp(mine[i].grad->ptr(), theirs[i].grad->ptr(), mine[i].grad->size() * sizeof(float)) == 0);
      }
      const auto g = exec::compare_owned(cuda::owned(*dev), exec::owned(cpu), true);
      CHECK(g.missing.empty());
      CHECK(g.max_ref > 0);
      CHECK((moe ? g.max_abs < 1e-5 : g.bitwise));
      const double oracle = oracle_norm(*dev);
      const double nd = dev->optimizer_step(opt), ns = seq->optimizer_step(opt), nc = cpu.optimizer_step(opt);
      CHECK(nd == ns);
      CHECK(nd == Approx(oracle).epsilon(1e-12));
      if (!moe) CHECK(nd == nc);
      const auto w = exec::compare_owned(cuda::owned(*dev), cuda::owned(*seq), false);
      CHECK(w.missing.empty());
      CHECK(w.bitwise);
    }
  }
}

TEST_CASE("device executor: MTP depths give the CPU executor's losses and gradients, bitwise without SwiGLU",
          "[engine][dev-executor][mtp]") {
  AdamWConfig opt;
  opt.clip_norm = 0.05f;
  // Two depths of attention (bitwise); one depth of MoE with a router loss scaled by the depths
  // (within the float32 bound of SwiGLU's exp), over EP 2 and DP 2 or 4. MTP runs the sequential
  // schedule only (rule O3), so without delayed wgrad (rule O10).
  for (const auto& [text, dp, ep] :
       {std::tuple{"[*]*/*/*", 2, 1}, std::tuple{"M*E/*E", 2, 2}, std::tuple{"M*E/*E", 4, 2}}) {
    INFO(text << " dp " << dp << " ep " << ep);
    const auto plan = exec::ep_plan(pat::parse(text), cfg(), 2, 6, ep, 2, false, false, dp);
    auto dev = host_ex(text, plan);
    exec::Executor cpu(pat::parse(text), cfg(), 5, plan);
    const bool moe = pat::parse(text).has_moe();
    for (int step = 0; step < 2; ++step) {
      INFO("step " << step);
      const auto batches = exec::random_batches(dp, 2, 2, 6, cfg().vocab_size, 60 + step);
      dev->zero_grad();
      cpu.zero_grad();
      const auto rd = dev->step(batches), rc = cpu.step(batches);
      if (!moe) CHECK(rd.loss == rc.loss);
      CHECK(std::fabs(rd.total - rc.total) <= 1e-5 * std::fabs(rc.total));
      const auto g = exec::compare_owned(cuda::owned(*dev), exec::owned(cpu), true);
      CHECK(g.missing.empty());
      CHECK((moe ? g.max_abs < 1e-5 : g.bitwise));
      // The depths' own weights learn (their gradients are not left at zero).
      for (const auto& p : dev->parameters(0))
        if (p.canonical.rfind("mtp.layers.", 0) == 0 && p.canonical.find("eh_proj") != std::string::npos) {
          INFO(p.canonical);
          CHECK(std::any_of(p.grad->data.begin(), p.grad->data.end(), [](float x) { return x != 0.0f; }));
        }
      const double nd = dev->optimizer_step(opt), nc = cpu.optimizer_step(opt);
      if (!moe) CHECK(nd == nc);
      CHECK(nd == Approx(nc).epsilon(1e-5));
    }
  }
}
