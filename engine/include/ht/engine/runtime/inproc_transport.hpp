// In-process transport for the CPU backend: all ranks are threads of one process, so a
// collective is a rendezvous in shared memory. Groups (EP groups, DP groups, pipeline pairs) are
// created up front; each member gets its own Communicator handle, as NCCL gives each rank its
// own communicator. An optional LinkModel makes every message take the time a real link would
// (link_model.hpp), with one egress link per global rank shared by all groups.
//
// Failure handling -- never a hang: members that disagree (different collective at the same
// position, different sizes) all throw; a member that waits longer than `timeout` for the others
// throws Timeout naming the collective and the missing members, and aborts its group; abort()
// makes every pending and later call on every group throw Aborted (CpuWorld calls it when any
// stream of any rank fails, so the other ranks stop waiting for it).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ht/engine/runtime/communicator.hpp>
#include <ht/engine/runtime/error.hpp>
#include <ht/engine/runtime/link_model.hpp>

namespace ht::engine::runtime {

struct TransportOptions {
  LinkModel link;
  std::chrono::milliseconds timeout = kDefaultDeadlockTimeout;
};

class InProcTransport {
 public:
  explicit InProcTransport(int world_size, TransportOptions options = {});
  ~InProcTransport();
  InProcTransport(const InProcTransport&) = delete;
  InProcTransport& operator=(const InProcTransport&) = delete;

  int world_size() const;
  const TransportOptions& options() const;

  // One communicator per member, in member order (result[k].rank() == k). Members are distinct
  // global ranks in [0, world_size). The handles may outlive the transport object.
  std::vector<std::unique_ptr<Communicator>> create_group(std::string name,
                                                          std::vector<int> global_ranks);

  // Egress traffic of one global rank since construction, over all groups.
  LinkStats link_stats(int global_rank) const;

  // First reason wins; idempotent.
  void abort(const std::string& reason);
  bool aborted() const;

  struct State;  // shared with the groups (inproc_transport.cpp)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ht::engine::runtime
