// Ranks as threads over CPU streams and the in-process transport (cpu_world.hpp).
#include <ht/engine/runtime/cpu_world.hpp>

#include <ht/engine/runtime/error.hpp>
#include <ht/engine/runtime/host_allocator.hpp>

#include <sched.h>

#include <exception>
#include <algorithm>
#include <map>
#include <string>
#include <thread>

namespace ht::engine::runtime {

namespace {
// CPUs this process may run on (the affinity mask: a container's cpuset, taskset), which all
// ranks' stream threads share; the twin models that sharing (platform key shared_cores).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string describe(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

bool is_consequence(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const RuntimeError& e) {
    return e.code() == ErrorCode::Aborted || e.code() == ErrorCode::UpstreamFailure;
  } catch (...) {
    return false;
  }
}
}  // namespace

CpuWorld::CpuWorld(CpuWorldOptions options)
    : options_(options),
      transport_(options.ranks, TransportOptions{options.link, options.timeout}) {
  keep_freed_host_memory();
  auto on_error = [this](int rank, const char* stream) {
    return [this, rank, stream](const std::exception_ptr& error) {
      transport_.abort("rank " + std::to_string(rank) + " " + stream + " stream failed: " +
                       describe(error));
    };
  };
  for (int r = 0; r < options_.ranks; ++r) {
    compute_.push_back(
        std::make_unique<CpuStream>(r, kComputeStream, &recorder_, on_error(r, "compute")));
    comm_.push_back(std::make_unique<CpuStream>(r, kCommStream, &recorder_, on_error(r, "comm")));
  }
  recorder_.set_metadata("ranks", std::to_string(options_.ranks));
  recorder_.set_metadata("host.cores", std::to_string(usable_cpus()));
  // Whether every comm stream runs ahead of compute on the shared cores (platform comm_priority).
  bool realtime = options_.comm_realtime;
  if (realtime)
    for (auto& s : comm_) realtime = s->request_realtime() && realtime;
  recorder_.set_metadata("host.comm_priority", realtime ? "realtime" : "normal");
  std::map<std::string, std::string> link;
  options_.link.write_metadata(link);
  for (const auto& [k, v] : link) recorder_.set_metadata(k, v);
}

CpuWorld::~CpuWorld() = default;

CpuStream& CpuWorld::compute(int rank) { return *compute_.at(static_cast<std::size_t>(rank)); }
CpuStream& CpuWorld::comm(int rank) { return *comm_.at(static_cast<std::size_t>(rank)); }

void CpuWorld::run(const std::function<void(RankContext&)>& body) {
  const auto n = static_cast<std::size_t>(options_.ranks);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> hosts;
  hosts.reserve(n);
  for (std::size_t r = 0; r < n; ++r) {
    hosts.emplace_back([&, r] {
      RankContext ctx{static_cast<int>(r), *compute_[r], *comm_[r], options_.timeout};
      try {
        body(ctx);
      } catch (...) {
        errors[r] = std::current_exception();
        transport_.abort("rank " + std::to_string(r) + " host failed: " + describe(errors[r]));
      }
      // Always drain both streams: work already enqueued refers to the body's state.
      for (CpuStream* s : {compute_[r].get(), comm_[r].get()}) {
        try {
          s->synchronize();
        } catch (...) {
          if (!errors[r] || (is_consequence(errors[r]) && !is_consequence(std::current_exception()))) {
            errors[r] = std::current_exception();
          }
        }
      }
    });
  }
  for (auto& h : hosts) h.join();
  std::exception_ptr root;
  for (const auto& e : errors) {
    if (e && !is_consequence(e)) {
      root = e;
      break;
    }
  }
  if (!root) {
    for (const auto& e : errors) {
      if (e) {
        root = e;
        break;
      }
    }
  }
  if (root) std::rethrow_exception(root);
}

traces::Timeline CpuWorld::timeline() const { return recorder_.timeline(); }

}  // namespace ht::engine::runtime
