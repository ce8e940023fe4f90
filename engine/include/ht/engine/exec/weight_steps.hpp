// The W nodes of a plan (delayed weight gradients, reference sections 3.3, 3.5 and 5.2 item 5),
// one piece of code for both executors: the CPU executor (exec/executor.cpp) and the device
// executor (engine/cuda/.../dev/executor.hpp, on a GPU or its host emulation) keep the W state of
// every (rank, microbatch, layer, slot) here and walk the same issue order.
//
// A slot with a W node: its backward (B) computes the input gradients and whatever a recurrence
// needs, and hands the weight-gradient GEMM of each linear map to the slot's DeferredGemms, which
// copies the GEMM's operands (the map's input and output gradient). The W node runs those GEMMs,
// into the same per-microbatch staging buffers the fused backward wrote, with the same calls in
// the same order -- so the bits do not change -- and frees the copies. A slot without a W node
// (no delayed wgrad, or nothing to delay) runs its GEMMs inside the backward.
//
// The ledger checks the bug class of delayed wgrad at run time: a W node that runs twice, one that
// runs before its backward (nothing saved yet) and one that never runs (its saved GEMMs are left
// at the end of the step) each fail the step with the node's name. WeightFault makes the walk
// commit each of them on purpose (tests only).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ht/engine/cpu/gemm.hpp"
#include "ht/engine/error.hpp"
#include "ht/engine/layers/wgrad.hpp"
#include "ht/schedule/plan.hpp"

namespace ht::engine::exec {

// Test-only faults in the walk of the W nodes: each rank's first W node is issued twice, not at
// all, or just before the backward whose GEMMs it runs (issue_order). The verifier must catch
// each: the step fails with the node's name (and without the ledger the gradients would differ).
enum class WeightFault { None, RunTwice, Skip, BeforeBackward };

// The host's memory and GEMM (the CPU executor's policy; the device executor passes its device
// policy, dev/host.hpp or the CUDA one, which has the same functions).
struct CpuMemory {
  template <class T> static T* alloc(std::size_t n) { return n == 0 ? nullptr : new T[n]; }
  template <class T> static void release(T* p) { delete[] p; }
  template <class T> static void copy(T* dst, const T* src, std::size_t n) { std::copy_n(src, n, dst); }
  template <class T>
  static void gemm(T* out, const T* a, const T* b, int m, int n, int k, bool trans_a, bool trans_b, bool accumulate) {
    cpu::matmul<T>(out, a, b, m, n, k, trans_a, trans_b, accumulate);
  }
};

// The weight-gradient GEMMs of one slot of one microbatch: operands copied when the backward hands
// them over (P's memory, P's current stream), run and freed by run().
template <class P, class T>
class DeferredGemms final : public WgradSink<T> {
 public:
  DeferredGemms() = default;
  DeferredGemms(const DeferredGemms&) = delete;
  DeferredGemms& operator=(const DeferredGemms&) = delete;
  ~DeferredGemms() override { clear(); }

  void linear(T* dweight, const T* dy, const T* x, int n, int c, int oc) override {
    gemms_.push_back({dweight, copy_of(dy, static_cast<std::size_t>(n) * oc), copy_of(x, static_cast<std::size_t>(n) * c),
                      n, c, oc});
  }
  // The GEMMs in the order they were handed over, each the call linear_backward makes
  // (cpu/gemm.hpp): dW (oc, c) += dy^T x.
  void run() {
    for (const Gemm& g : gemms_) P::gemm(g.dweight, g.dy.data, g.x.data, g.oc, g.c, g.n, true, false, true);
    clear();
  }
  std::size_t pending() const { return gemms_.size(); }

 private:
  // A copy at the source's address modulo kAlign bytes: a GEMM library may choose its kernel by
  // the operands' alignment (cuBLAS does), so the deferred GEMM sees its operands aligned as the
  // fused backward's were (an expert's rows start anywhere in the routed buffer). Device blocks
  // start at a multiple of kAlign; the host's GEMM (Eigen, OpenBLAS) packs its operands and does
  // not depend on their addresses.
  static constexpr std::size_t kAlign = 256;
  struct Copy {
    T* base;
    T* data;
  };
  struct Gemm {
    T* dweight;
    Copy dy, x;
    int n, c, oc;
  };
  static Copy copy_of(const T* src, std::size_t n) {
    const std::size_t shift = (reinterpret_cast<std::uintptr_t>(src) % kAlign) / sizeof(T);
    T* base = P::template alloc<T>(n + kAlign / sizeof(T));
    P::copy(base + shift, src, n);
    return {base, base + shift};
  }
  void clear() {
    for (const Gemm& g : gemms_) {
      P::release(g.dy.base);
      P::release(g.x.base);
    }
    gemms_.clear();
  }
  std::vector<Gemm> gemms_;
};

// Which slot of which microbatch: a W node and the B node whose GEMMs it runs share it.
struct SlotKey {
  int rank = 0, microbatch = 0;
  bool mtp = false;
  int layer = 0;
  schedule::Slot slot = schedule::Slot::PreDispatch;
  static SlotKey of(const schedule::Node& n) { return {n.rank, n.microbatch, n.mtp, n.layer, n.slot}; }
  auto operator<=>(const SlotKey&) const = default;
};

// Rank r's issue order, with `fault` applied to its first W node (WeightFault).
inline std::vector<int> issue_order(const schedule::Plan& plan, int r, WeightFault fault) {
  std::vector<int> issue = plan.ranks.at(static_cast<std::size_t>(r)).issue;
  if (fault == WeightFault::None) return issue;
  const auto w = std::find_if(issue.begin(), issue.end(),
                              [&](int id) { return plan.node(id).phase == schedule::Phase::Weight; });
  if (w == issue.end()) return issue;
  const int id = *w;
  switch (fault) {
    case WeightFault::RunTwice: issue.insert(w + 1, id); break;
    case WeightFault::Skip: issue.erase(w); break;
    case WeightFault::BeforeBackward: {
      const SlotKey key = SlotKey::of(plan.node(id));
      const auto b = std::find_if(issue.begin(), w, [&](int other) {
        const schedule::Node& n = plan.node(other);
        return n.phase == schedule::Phase::Backward && SlotKey::of(n) == key;
      });
      issue.erase(w);
      issue.insert(b, id);
      break;
    }
    case WeightFault::None: break;
  }
  return issue;
}

// The W state of the slots of ranks [first, first + count) for one step. Built before the step
// (one entry per W node), then touched only by the nodes of the entry's own microbatch chain, so
// the CPU executor's stream threads share it without a lock.
template <class P, class T>
class WeightSteps {
 public:
  WeightSteps(const schedule::Plan& plan, int first, int count) {
    for (const auto& n : plan.nodes)
      if (n.phase == schedule::Phase::Weight && n.rank >= first && n.rank < first + count) slots_[SlotKey::of(n)];
  }
  WeightSteps(const WeightSteps&) = delete;
  WeightSteps& operator=(const WeightSteps&) = delete;

  // Whether the node's slot has a W node that runs its weight GEMMs.
  bool delayed(const schedule::Node& n) const { return slots_.count(SlotKey::of(n)) > 0; }
  // The sink a backward hands the slot's weight GEMMs to; null when they run in the backward.
  // (The device executor's combine backward runs the shared expert's backward, whose GEMMs the
  // pre_dispatch slot owns: it asks for that slot's sink.)
  WgradSink<T>* sink(const SlotKey& key) {
    const auto it = slots_.find(key);
    return it == slots_.end() ? nullptr : &it->second.gemms;
  }

  // B of a slot: bwd(sink) runs the backward; without a W node, `flush` (the slot's staged
  // gradients into the parameters' gradients) follows at once, as the fused backward did.
  template <class Bwd, class Flush>
  void backward(const schedule::Node& b, Bwd&& bwd, Flush&& flush) {
    const auto it = slots_.find(SlotKey::of(b));
    if (it == slots_.end()) {
      bwd(static_cast<WgradSink<T>*>(nullptr));
      flush();
      return;
    }
    bwd(static_cast<WgradSink<T>*>(&it->second.gemms));
    it->second.backward_ran = true;
  }
  // W of a slot: its saved GEMMs, then `flush`.
  template <class Flush>
  void weight(const schedule::Node& w, Flush&& flush) {
    const auto it = slots_.find(SlotKey::of(w));
    if (it == slots_.end()) fail("W node " + w.label() + " of rank " + std::to_string(w.rank) + " is not a W node of the plan");
    Slot& s = it->second;
    if (s.weight_ran)
      fail("W node " + w.label() + " of rank " + std::to_string(w.rank) +
           " ran twice: its weight gradients would be added again (delayed wgrad)");
    if (!s.backward_ran)
      fail("W node " + w.label() + " of rank " + std::to_string(w.rank) +
           " ran before its backward: the weight-gradient GEMMs' inputs were not saved yet (delayed wgrad)");
    s.gemms.run();
    s.weight_ran = true;
    flush();
  }
  // After the step: every W node ran (a skipped one leaves its saved GEMMs and their gradients
  // out of the parameters' gradients).
  void finish() const {
    for (const auto& [k, s] : slots_)
      if (!s.weight_ran)
        fail("the W node of rank " + std::to_string(k.rank) + ", microbatch " + std::to_string(k.microbatch) +
             (k.mtp ? ", MTP depth " : ", layer ") + std::to_string(k.layer) + ", slot " +
             std::string(schedule::to_string(k.slot)) + " never ran: " + std::to_string(s.gemms.pending()) +
             " saved weight-gradient GEMMs are missing from the gradients (delayed wgrad)");
  }

 private:
  struct Slot {
    DeferredGemms<P, T> gemms;
    bool backward_ran = false, weight_ran = false;
  };
  [[noreturn]] static void fail(const std::string& message) { throw EngineError(ErrorCode::BadConfig, "executor: " + message); }
  std::map<SlotKey, Slot> slots_;
};

}  // namespace ht::engine::exec
