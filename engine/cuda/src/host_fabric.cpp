// The host emulation's thread fabric (process_group.hpp): the endpoints of one process's device
// threads, moving host floats between the threads' memory. A send is posted into its (from, to)
// channel; a receive, at end(), takes the channel's oldest send (so transfers between two threads
// match in posting order, as NCCL's and MPI's do), and end() returns once this thread's receives
// are copied and its sends were taken (their buffers are then free to change).
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ht/engine/cuda/process_group.hpp"

namespace ht::engine::cuda {
namespace {

class HostFabric final : public ThreadFabric {
 public:
  explicit HostFabric(int n) : n_(n), slots_(static_cast<std::size_t>(n)) {
    if (n < 1) throw std::runtime_error("host fabric: " + std::to_string(n) + " threads");
  }
  int size() const override { return n_; }
  std::unique_ptr<ProcessGroup> join(int i) override;
  void leave(int) override {}
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

  struct Msg {
    const float* data;
    std::size_t n;
  };
  // Waits on cv_ until ready(); throws when another thread aborted the fabric.
  template <class Ready>
  void wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    cv_.wait(lock, [&] { return aborted_ || ready(); });
    if (aborted_) throw std::runtime_error("device threads: another thread failed; this one stops waiting");
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  int n_;
  std::map<std::pair<int, int>, std::deque<Msg>> channels_;  // (from, to) -> posted, not yet taken
  std::vector<std::vector<double>> slots_;                   // all_gather: each thread's values
  int arrived_ = 0;
  long generation_ = 0;
  std::vector<double> gathered_;
};

class HostEndpoint final : public ProcessGroup {
 public:
  HostEndpoint(HostFabric& f, int me) : f_(f), me_(me) {}
  std::string name() const override { return "threads"; }
  int process() const override { return me_; }
  int processes() const override { return f_.n_; }
  void begin() override {
    recvs_.clear();
    sent_to_.clear();
  }
  void send(const float* data, std::size_t n, int peer) override {
    if (n == 0) return;
    check_peer(peer);
    std::lock_guard<std::mutex> lock(f_.mu_);
    f_.channels_[{me_, peer}].push_back({data, n});
    sent_to_.push_back(peer);
    f_.cv_.notify_all();
  }
  void recv(float* data, std::size_t n, int peer) override {
    if (n == 0) return;
    check_peer(peer);
    recvs_.push_back({data, n, peer});
  }
  void end() override {
    std::unique_lock<std::mutex> lock(f_.mu_);
    for (const Recv& r : recvs_) {
      auto& channel = f_.channels_[{r.peer, me_}];
      f_.wait(lock, [&] { return !channel.empty(); });
      const HostFabric::Msg m = channel.front();
      channel.pop_front();
      if (m.n != r.n)
        throw std::runtime_error("device threads: thread " + std::to_string(me_) + " expects " + std::to_string(r.n) +
                                 " floats from thread " + std::to_string(r.peer) + ", which sends " + std::to_string(m.n));
      std::memcpy(r.data, m.data, r.n * sizeof(float));
      f_.cv_.notify_all();
    }
    // Every send of this thread taken: wait until its channels hold none of them.
    for (const int peer : sent_to_) {
      auto& channel = f_.channels_[{me_, peer}];
      f_.wait(lock, [&] { return channel.empty(); });
    }
    recvs_.clear();
    sent_to_.clear();
  }
  std::vector<double> all_gather(const std::vector<double>& mine) override {
    std::unique_lock<std::mutex> lock(f_.mu_);
    f_.slots_[static_cast<std::size_t>(me_)] = mine;
    const long gen = f_.generation_;
    if (++f_.arrived_ == f_.n_) {
      f_.gathered_.clear();
      for (const auto& s : f_.slots_) {
        if (s.size() != mine.size()) throw std::runtime_error("device threads: all_gather of different lengths");
        f_.gathered_.insert(f_.gathered_.end(), s.begin(), s.end());
      }
      f_.arrived_ = 0;
      ++f_.generation_;
      f_.cv_.notify_all();
    } else {
      f_.wait(lock, [&] { return f_.generation_ != gen; });
    }
    return f_.gathered_;
  }

 private:
  struct Recv {
    float* data;
    std::size_t n;
    int peer;
  };
  void check_peer(int peer) const {
    if (peer < 0 || peer >= f_.n_ || peer == me_) throw std::runtime_error("device threads: no peer thread " + std::to_string(peer));
  }
  HostFabric& f_;
  int me_;
  std::vector<Recv> recvs_;
  std::vector<int> sent_to_;
};

std::unique_ptr<ProcessGroup> HostFabric::join(int i) {
  if (i < 0 || i >= n_) throw std::runtime_error("host fabric: no thread " + std::to_string(i));
  return std::make_unique<HostEndpoint>(*this, i);
}

}  // namespace

std::unique_ptr<ThreadFabric> make_host_fabric(int threads) { return std::make_unique<HostFabric>(threads); }

}  // namespace ht::engine::cuda
