// The collective interface of one process group (an EP group, a DP group, a pipeline pair), as
// the executor calls it from work running on a rank's comm stream. InProcCommunicator
// (inproc_transport.hpp) implements it for ranks that are threads; an NCCL communicator will
// implement it for GPUs. Members call collectives in the same order; the k-th call of every
// member forms one collective.
//
// Determinism contract of all_reduce_sum (DESIGN.md "Engine numerics"): every member receives
//     out[i] = ((...((x_0[i] + x_1[i]) + x_2[i]) + ...) + x_{n-1}[i])
// in float32, x_k the contribution of group member k, summed left to right starting from x_0
// itself (not from 0.0f, which would turn -0.0f into +0.0f). The result is therefore bitwise
// independent of thread timing and identical on all members. EP=n equals EP=1 bitwise only if the
// single-rank run builds the same tree: it must first form, for each k in 0..n-1, the partial
// gradient g_k over exactly the microbatches rank k owns, accumulated in the same order as rank k
// does, and then add g_0 + g_1 + ... + g_{n-1} left to right. Plain accumulation over all
// microbatches in one running sum matches only when every rank owns one microbatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <ht/engine/runtime/error.hpp>

namespace ht::engine::runtime {

using ConstBytes = std::span<const std::byte>;
using MutableBytes = std::span<std::byte>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // index of this member in the group, 0..size()-1
  virtual int size() const = 0;
  virtual int global_rank(int member) const = 0;
  virtual const std::string& name() const = 0;  // e.g. "ep0", "dp", "pp 0->1"

  // All-to-all with per-peer sizes: send[p] goes to member p, recv[p] receives from member p.
  // Both spans have size() entries; send[p] of member q must have exactly the size of recv[q] of
  // member p, otherwise every member throws SizeMismatch. `label` names the call in errors.
  virtual void all_to_all_v_bytes(std::span<const ConstBytes> send,
                                  std::span<const MutableBytes> recv, std::string_view label) = 0;
  // In-place deterministic sum (see the contract above). All members pass the same n.
  virtual void all_reduce_sum(float* data, std::size_t n, std::string_view label) = 0;
  // Buffered point-to-point: send returns once the message has left this rank's link; recv
  // blocks until the matching (peer, tag) message has arrived. Messages of one (peer, tag) pair
  // are received in send order. recv throws SizeMismatch when the sizes differ.
  virtual void send_bytes(int peer, int tag, ConstBytes data, std::string_view label) = 0;
  virtual void recv_bytes(int peer, int tag, MutableBytes data, std::string_view label) = 0;

  // ---- typed conveniences (any trivially copyable element type) ----

  template <class T>
  void all_to_all_v(const std::vector<std::span<const T>>& send, const std::vector<std::span<T>>& recv,
                    std::string_view label = "all_to_all_v") {
    static_assert(std::is_trivially_copyable_v<T>);
    std::vector<ConstBytes> s;
    std::vector<MutableBytes> r;
    for (const auto& x : send) s.push_back(std::as_bytes(x));
    for (const auto& x : recv) r.push_back(std::as_writable_bytes(x));
    all_to_all_v_bytes(s, r, label);
  }

  // Receivers do not know their sizes: exchange the counts first (one all-to-all of uint64, as
  // Megatron's dispatcher exchanges tokens-per-expert), then the payload. Two collectives.
  template <class T>
  std::vector<std::vector<T>> all_to_all_v(const std::vector<std::vector<T>>& send,
                                           std::string_view label = "all_to_all_v") {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto n = static_cast<std::size_t>(size());
    if (send.size() != n) {
      throw RuntimeError(ErrorCode::InvalidArgument,
                         name() + ": all_to_all_v '" + std::string(label) + "' got " +
                             std::to_string(send.size()) + " send buffers for " +
                             std::to_string(n) + " members");
    }
    std::vector<std::uint64_t> send_counts(n), recv_counts(n);
    for (std::size_t p = 0; p < n; ++p) send_counts[p] = send[p].size();
    std::vector<std::span<const std::uint64_t>> sc;
    std::vector<std::span<std::uint64_t>> rc;
    for (std::size_t p = 0; p < n; ++p) {
      sc.emplace_back(&send_counts[p], 1);
      rc.emplace_back(&recv_counts[p], 1);
    }
    all_to_all_v<std::uint64_t>(sc, rc, std::string(label) + " (counts)");
    std::vector<std::vector<T>> recv(n);
    std::vector<std::span<const T>> s;
    std::vector<std::span<T>> r;
    for (std::size_t p = 0; p < n; ++p) {
      recv[p].resize(static_cast<std::size_t>(recv_counts[p]));
      s.emplace_back(send[p]);
      r.emplace_back(recv[p]);
    }
    all_to_all_v<T>(s, r, label);
    return recv;
  }

  template <class T>
  void send(int peer, int tag, std::span<const T> data, std::string_view label = "send") {
    static_assert(std::is_trivially_copyable_v<T>);
    send_bytes(peer, tag, std::as_bytes(data), label);
  }
  template <class T>
  void recv(int peer, int tag, std::span<T> data, std::string_view label = "recv") {
    static_assert(std::is_trivially_copyable_v<T>);
    recv_bytes(peer, tag, std::as_writable_bytes(data), label);
  }
};

}  // namespace ht::engine::runtime
