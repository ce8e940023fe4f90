// Rendezvous collectives, buffered point-to-point and the link throttle of the in-process
// transport (inproc_transport.hpp). A collective goes through three steps under the group lock:
// arrive (park pointers to the caller's buffers), complete (the last arrival validates, reduces
// and schedules the links), depart (every member copies out, then waits until all have copied, so
// no sender returns -- and frees a buffer -- while a peer still reads it). The throttle's sleep
// happens after departure, outside every lock.
#include <ht/engine/runtime/inproc_transport.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

namespace ht::engine::runtime {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

namespace {
struct Group;
}

struct InProcTransport::State {
  int world = 0;
  TransportOptions options;
  Clock::time_point origin = Clock::now();

  std::mutex link_mutex;  // taken after a group's mutex, never before
  std::vector<nanoseconds> link_free;
  std::vector<LinkStats> stats;

  std::mutex groups_mutex;  // taken before a group's mutex, never after
  std::vector<std::weak_ptr<Group>> groups;
  std::optional<std::string> abort_reason;

  nanoseconds now() const { return std::chrono::duration_cast<nanoseconds>(Clock::now() - origin); }
  void sleep_until(nanoseconds t) const {
    if (options.link.enabled()) std::this_thread::sleep_until(origin + t);
  }
};

namespace {

enum class Op { AllToAll, AllReduce };

std::string_view op_name(Op op) { return op == Op::AllToAll ? "all_to_all_v" : "all_reduce_sum"; }

struct Arrival {
  Op op = Op::AllToAll;
  std::string label;
  std::span<const ConstBytes> send;
  std::span<const MutableBytes> recv;
  float* data = nullptr;
  std::size_t count = 0;
  std::string local_error;  // malformed on this member alone; reported by all members
};

struct Rendezvous {
  std::vector<std::optional<Arrival>> arrivals;
  int arrived = 0;
  int departed = 0;
  bool ready = false;
  std::optional<RuntimeError> error;
  std::vector<float> sum;
  std::vector<nanoseconds> finish;  // per member, from the link schedule
  std::optional<std::string> timed_out;  // set by the member whose deadlock detector fired
};

struct Mail {
  std::vector<std::byte> bytes;
  nanoseconds ready_at{0};
};

struct Group {
  std::string name;
  std::vector<int> ranks;  // member -> global rank
  std::shared_ptr<InProcTransport::State> transport;

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::uint64_t> next_seq;
  std::map<std::uint64_t, std::shared_ptr<Rendezvous>> open;
  std::map<std::tuple<int, int, int>, std::deque<Mail>> mailbox;  // (src, dst, tag)
  std::optional<std::string> abort_reason;

  int size() const { return static_cast<int>(ranks.size()); }

  std::string where(Op op, std::string_view label) const {
    return "group '" + name + "': " + std::string(op_name(op)) + " '" + std::string(label) + "'";
  }

  // Caller holds `mutex`.
  void abort_locked(const std::string& reason) {
    if (!abort_reason) abort_reason = reason;
    changed.notify_all();
  }
  [[noreturn]] void throw_aborted(std::string_view what) const {
    throw RuntimeError(ErrorCode::Aborted,
                       "group '" + name + "': " + std::string(what) + ": aborted: " + *abort_reason);
  }

  // Link schedule for one collective starting now; caller holds `mutex`.
  std::vector<nanoseconds> schedule(const std::vector<std::vector<LinkMessage>>& phases) {
    State& t = *transport;
    std::lock_guard link_lock(t.link_mutex);
    std::vector<nanoseconds> link_free;
    for (int g : ranks) link_free.push_back(t.link_free[static_cast<std::size_t>(g)]);
    LinkScheduleResult r = schedule_links(t.options.link, t.now(), link_free, phases);
    for (std::size_t m = 0; m < ranks.size(); ++m) {
      const auto g = static_cast<std::size_t>(ranks[m]);
      t.link_free[g] = link_free[m];
      t.stats[g].messages += r.sent[m].messages;
      t.stats[g].bytes += r.sent[m].bytes;
      t.stats[g].busy += r.sent[m].busy;
    }
    return r.finish;
  }

  using State = InProcTransport::State;

  // The last arrival checks agreement, reduces and schedules. Caller holds `mutex`.
  void complete(Rendezvous& rv, std::uint64_t seq) {
    const int n = size();
    const Arrival& first = *rv.arrivals[0];
    for (int m = 0; m < n; ++m) {
      const Arrival& a = *rv.arrivals[static_cast<std::size_t>(m)];
      if (a.op != first.op) {
        rv.error = RuntimeError(
            ErrorCode::CollectiveMismatch,
            "group '" + name + "': collective #" + std::to_string(seq) + ": member 0 called " +
                std::string(op_name(first.op)) + " '" + first.label + "' but member " +
                std::to_string(m) + " called " + std::string(op_name(a.op)) + " '" + a.label +
                "' (members must call collectives in the same order)");
        return;
      }
    }
    for (int m = 0; m < n; ++m) {
      const Arrival& a = *rv.arrivals[static_cast<std::size_t>(m)];
      if (!a.local_error.empty()) {
        rv.error = RuntimeError(ErrorCode::InvalidArgument, where(a.op, a.label) + ": member " +
                                                                std::to_string(m) + ": " +
                                                                a.local_error);
        return;
      }
    }
    std::vector<std::vector<LinkMessage>> phases;
    if (first.op == Op::AllToAll) {
      for (int q = 0; q < n; ++q) {
        for (int p = 0; p < n; ++p) {
          const std::size_t sent = rv.arrivals[static_cast<std::size_t>(q)]->send[static_cast<std::size_t>(p)].size();
          const std::size_t expected = rv.arrivals[static_cast<std::size_t>(p)]->recv[static_cast<std::size_t>(q)].size();
          if (sent != expected) {
            rv.error = RuntimeError(
                ErrorCode::SizeMismatch,
                where(first.op, first.label) + ": member " + std::to_string(q) + " sends " +
                    std::to_string(sent) + " bytes to member " + std::to_string(p) +
                    ", which expects " + std::to_string(expected) + " bytes");
            return;
          }
        }
      }
      // Each sender walks its peers in ring order, so no receiver is everybody's first target.
      phases.emplace_back();
      for (int q = 0; q < n; ++q) {
        for (int k = 1; k < n; ++k) {
          const int p = (q + k) % n;
          phases[0].push_back(LinkMessage{
              q, p, rv.arrivals[static_cast<std::size_t>(q)]->send[static_cast<std::size_t>(p)].size()});
        }
      }
    } else {
      for (int m = 0; m < n; ++m) {
        const Arrival& a = *rv.arrivals[static_cast<std::size_t>(m)];
        if (a.count != first.count) {
          rv.error = RuntimeError(ErrorCode::SizeMismatch,
                                  where(first.op, first.label) + ": member 0 reduces " +
                                      std::to_string(first.count) + " floats but member " +
                                      std::to_string(m) + " reduces " + std::to_string(a.count));
          return;
        }
      }
      // The fixed order of the contract in communicator.hpp: start from x_0, add x_1 .. x_{n-1}.
      const std::size_t count = first.count;
      rv.sum.assign(first.data, first.data + count);
      for (int m = 1; m < n; ++m) {
        const float* x = rv.arrivals[static_cast<std::size_t>(m)]->data;
        for (std::size_t i = 0; i < count; ++i) rv.sum[i] += x[i];
      }
      // Charged traffic: a direct reduce-scatter then all-gather over n chunks (chunk c has
      // count/n elements, the first count%n one more). Member m sends peer p its part of chunk p,
      // then its reduced chunk m -- 2*S/n bytes per peer when n divides the count S, the
      // volume the schedule plan assigns to gradient all-reduce nodes.
      auto chunk_bytes = [&](int c) {
        const std::size_t nn = static_cast<std::size_t>(n);
        const std::size_t elems = count / nn + (static_cast<std::size_t>(c) < count % nn ? 1 : 0);
        return static_cast<std::uint64_t>(elems * sizeof(float));
      };
      phases.resize(2);
      for (int m = 0; m < n; ++m) {
        for (int k = 1; k < n; ++k) {
          const int p = (m + k) % n;
          phases[0].push_back(LinkMessage{m, p, chunk_bytes(p)});
          phases[1].push_back(LinkMessage{m, p, chunk_bytes(m)});
        }
      }
    }
    rv.finish = schedule(phases);
  }

  // Arrive, wait for completion, copy out, depart, then sleep for the modelled link time.
  void collective(int me, Arrival arrival) {
    State& t = *transport;
    const Op op = arrival.op;
    const std::string label = arrival.label;
    std::unique_lock lock(mutex);
    if (abort_reason) throw_aborted(std::string(op_name(op)) + " '" + label + "'");
    const std::uint64_t seq = next_seq[static_cast<std::size_t>(me)]++;
    auto& slot = open[seq];
    if (!slot) {
      slot = std::make_shared<Rendezvous>();
      slot->arrivals.resize(ranks.size());
    }
    std::shared_ptr<Rendezvous> rv = slot;
    rv->arrivals[static_cast<std::size_t>(me)] = std::move(arrival);
    if (++rv->arrived == size()) {
      complete(*rv, seq);
      rv->ready = true;
      changed.notify_all();
    } else {
      const auto deadline = Clock::now() + t.options.timeout;
      while (!rv->ready && !abort_reason) {
        if (changed.wait_until(lock, deadline) == std::cv_status::timeout && !rv->ready &&
            !abort_reason) {
          std::string missing;
          for (int m = 0; m < size(); ++m) {
            if (!rv->arrivals[static_cast<std::size_t>(m)]) {
              missing += (missing.empty() ? "" : ", ") + std::to_string(m) + " (rank " +
                         std::to_string(ranks[static_cast<std::size_t>(m)]) + ")";
            }
          }
          const std::string message =
              where(op, label) + " (collective #" + std::to_string(seq) + "): timed out after " +
              std::to_string(t.options.timeout.count()) + " ms waiting for member(s) " + missing +
              " (deadlock: members must call collectives in the same order)";
          rv->timed_out = message;
          abort_locked(message);
          throw RuntimeError(ErrorCode::Timeout, message);
        }
      }
      // Members waiting on the same collective report the same deadlock, not a mere abort.
      if (!rv->ready && rv->timed_out) throw RuntimeError(ErrorCode::Timeout, *rv->timed_out);
      if (!rv->ready) throw_aborted(std::string(op_name(op)) + " '" + label + "'");
    }
    // Every member is inside this call from here on, so their buffers stay valid until departure.
    if (!rv->error) {
      lock.unlock();
      const Arrival& mine = *rv->arrivals[static_cast<std::size_t>(me)];
      if (op == Op::AllToAll) {
        for (std::size_t p = 0; p < ranks.size(); ++p) {
          const ConstBytes from = rv->arrivals[p]->send[static_cast<std::size_t>(me)];
          if (!from.empty()) std::memcpy(mine.recv[p].data(), from.data(), from.size());
        }
      } else if (mine.count > 0) {
        std::memcpy(mine.data, rv->sum.data(), mine.count * sizeof(float));
      }
      lock.lock();
    }
    if (++rv->departed == size()) {
      open.erase(seq);
      changed.notify_all();
    } else {
      changed.wait(lock, [&] { return rv->departed == size(); });
    }
    if (rv->error) throw *rv->error;
    const nanoseconds finish = rv->finish[static_cast<std::size_t>(me)];
    lock.unlock();
    t.sleep_until(finish);
  }

  void send(int me, int peer, int tag, ConstBytes data, std::string_view label) {
    check_peer(peer, "send", label);
    State& t = *transport;
    nanoseconds ready_at{0};
    {
      std::lock_guard lock(mutex);
      if (abort_reason) throw_aborted("send '" + std::string(label) + "'");
      std::vector<std::vector<LinkMessage>> phases(1);
      phases[0].push_back(LinkMessage{me, peer, data.size()});
      ready_at = schedule(phases)[static_cast<std::size_t>(me)];
      mailbox[{me, peer, tag}].push_back(Mail{{data.begin(), data.end()}, ready_at});
      changed.notify_all();
    }
    t.sleep_until(ready_at);  // the sender's comm stream is busy while its link carries the data
  }

  void recv(int me, int peer, int tag, MutableBytes out, std::string_view label) {
    check_peer(peer, "recv", label);
    State& t = *transport;
    Mail mail;
    {
      std::unique_lock lock(mutex);
      auto& queue = mailbox[{peer, me, tag}];
      const auto deadline = Clock::now() + t.options.timeout;
      while (queue.empty() && !abort_reason) {
        if (changed.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty() &&
            !abort_reason) {
          throw RuntimeError(ErrorCode::Timeout,
                             "group '" + name + "': recv '" + std::string(label) + "' from member " +
                                 std::to_string(peer) + " tag " + std::to_string(tag) +
                                 ": no message after " + std::to_string(t.options.timeout.count()) +
                                 " ms (deadlock or missing send)");
        }
      }
      if (queue.empty()) throw_aborted("recv '" + std::string(label) + "'");
      mail = std::move(queue.front());
      queue.pop_front();
    }
    if (mail.bytes.size() != out.size()) {
      throw RuntimeError(ErrorCode::SizeMismatch,
                         "group '" + name + "': recv '" + std::string(label) + "' from member " +
                             std::to_string(peer) + " tag " + std::to_string(tag) + ": expected " +
                             std::to_string(out.size()) + " bytes, the message has " +
                             std::to_string(mail.bytes.size()));
    }
    t.sleep_until(mail.ready_at);
    if (!out.empty()) std::memcpy(out.data(), mail.bytes.data(), out.size());
  }

  void check_peer(int peer, std::string_view what, std::string_view label) const {
    if (peer < 0 || peer >= size()) {
      throw RuntimeError(ErrorCode::InvalidArgument,
                         "group '" + name + "': " + std::string(what) + " '" + std::string(label) +
                             "': peer " + std::to_string(peer) + " is not a member (size " +
                             std::to_string(size()) + ")");
    }
  }
};

class InProcCommunicator final : public Communicator {
 public:
  InProcCommunicator(std::shared_ptr<Group> group, int member)
      : group_(std::move(group)), member_(member) {}

  int rank() const override { return member_; }
  int size() const override { return group_->size(); }
  int global_rank(int member) const override {
    group_->check_peer(member, "global_rank", "");
    return group_->ranks[static_cast<std::size_t>(member)];
  }
  const std::string& name() const override { return group_->name; }

  void all_to_all_v_bytes(std::span<const ConstBytes> send, std::span<const MutableBytes> recv,
                          std::string_view label) override {
    Arrival a;
    a.op = Op::AllToAll;
    a.label = std::string(label);
    const auto n = static_cast<std::size_t>(size());
    if (send.size() != n || recv.size() != n) {
      a.local_error = "got " + std::to_string(send.size()) + " send and " +
                      std::to_string(recv.size()) + " receive buffers for " + std::to_string(n) +
                      " members";
    } else {
      a.send = send;
      a.recv = recv;
    }
    group_->collective(member_, std::move(a));
  }

  void all_reduce_sum(float* data, std::size_t n, std::string_view label) override {
    Arrival a;
    a.op = Op::AllReduce;
    a.label = std::string(label);
    a.data = data;
    a.count = n;
    if (data == nullptr && n > 0) a.local_error = "null data for " + std::to_string(n) + " floats";
    group_->collective(member_, std::move(a));
  }

  void send_bytes(int peer, int tag, ConstBytes data, std::string_view label) override {
    group_->send(member_, peer, tag, data, label);
  }
  void recv_bytes(int peer, int tag, MutableBytes data, std::string_view label) override {
    group_->recv(member_, peer, tag, data, label);
  }

 private:
  std::shared_ptr<Group> group_;
  int member_;
};

}  // namespace

InProcTransport::InProcTransport(int world_size, TransportOptions options)
    : state_(std::make_shared<State>()) {
  if (world_size < 1) {
    throw RuntimeError(ErrorCode::InvalidArgument,
                       "transport: world size must be >= 1, got " + std::to_string(world_size));
  }
  options.link.validate();
  if (options.timeout.count() <= 0) {
    throw RuntimeError(ErrorCode::InvalidArgument, "transport: timeout must be positive");
  }
  state_->world = world_size;
  state_->options = options;
  state_->link_free.assign(static_cast<std::size_t>(world_size), nanoseconds{0});
  state_->stats.assign(static_cast<std::size_t>(world_size), LinkStats{});
}

InProcTransport::~InProcTransport() = default;

int InProcTransport::world_size() const { return state_->world; }
const TransportOptions& InProcTransport::options() const { return state_->options; }

std::vector<std::unique_ptr<Communicator>> InProcTransport::create_group(
    std::string name, std::vector<int> global_ranks) {
  if (global_ranks.empty()) {
    throw RuntimeError(ErrorCode::InvalidArgument, "group '" + name + "': no members");
  }
  std::vector<int> sorted = global_ranks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= state_->world) {
    throw RuntimeError(ErrorCode::InvalidArgument,
                       "group '" + name + "': members must be distinct ranks in [0, " +
                           std::to_string(state_->world) + ")");
  }
  auto group = std::make_shared<Group>();
  group->name = std::move(name);
  group->ranks = std::move(global_ranks);
  group->transport = state_;
  group->next_seq.assign(group->ranks.size(), 0);
  {
    std::lock_guard lock(state_->groups_mutex);
    if (state_->abort_reason) group->abort_reason = state_->abort_reason;
    state_->groups.push_back(group);
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (int m = 0; m < group->size(); ++m) out.push_back(std::make_unique<InProcCommunicator>(group, m));
  return out;
}

LinkStats InProcTransport::link_stats(int global_rank) const {
  if (global_rank < 0 || global_rank >= state_->world) {
    throw RuntimeError(ErrorCode::InvalidArgument,
                       "transport: no rank " + std::to_string(global_rank));
  }
  std::lock_guard lock(state_->link_mutex);
  return state_->stats[static_cast<std::size_t>(global_rank)];
}

void InProcTransport::abort(const std::string& reason) {
  std::lock_guard lock(state_->groups_mutex);
  if (!state_->abort_reason) state_->abort_reason = reason;
  for (auto& weak : state_->groups) {
    if (auto group = weak.lock()) {
      std::lock_guard group_lock(group->mutex);
      group->abort_locked(*state_->abort_reason);
    }
  }
}

bool InProcTransport::aborted() const {
  std::lock_guard lock(state_->groups_mutex);
  return state_->abort_reason.has_value();
}

}  // namespace ht::engine::runtime
