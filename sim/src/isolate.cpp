// Runs one simulation in a forked child and ships its RawReplay back through a pipe. Why a child:
// SimGrid's clock and static signals survive between engines in one process, so the same replay
// rounded differently depending on history (found by the determinism property); a fresh process
// per replay makes the twin a pure function of its inputs. Copy-on-write keeps the plan shared.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "ht/io/child_process.hpp"
#include "raw_replay.hpp"

namespace ht::sim::detail {

namespace {

void put_bytes(std::string& out, const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
template <class T>
void put(std::string& out, const T& v) {
  put_bytes(out, &v, sizeof v);
}
void put(std::string& out, const std::string& s) {
  put(out, static_cast<std::uint64_t>(s.size()));
  put_bytes(out, s.data(), s.size());
}
void put(std::string& out, const std::vector<double>& v) {
  put(out, static_cast<std::uint64_t>(v.size()));
  put_bytes(out, v.data(), v.size() * sizeof(double));
}

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  void bytes(void* p, std::size_t n) {
    if (at + n > in.size()) throw SimError(SimErrorCode::BadPlan, "simulation process sent a truncated result");
    std::memcpy(p, in.data() + at, n);
    at += n;
  }
  template <class T>
  void get(T& v) {
    bytes(&v, sizeof v);
  }
  void get(std::string& s) {
    std::uint64_t n = 0;
    get(n);
    s.resize(n);
    bytes(s.data(), n);
  }
  void get(std::vector<double>& v) {
    std::uint64_t n = 0;
    get(n);
    v.resize(n);
    bytes(v.data(), n * sizeof(double));
  }
};

std::string encode(const RawReplay& r) {
  std::string out;
  put(out, r.failed);
  put(out, r.error);
  put(out, r.message);
  put(out, r.activities);
  put(out, r.flows);
  put(out, r.a2a_model);
  put(out, r.start);
  put(out, r.end);
  put(out, r.wait);
  return out;
}

RawReplay decode(const std::string& in) {
  RawReplay r;
  Reader rd{in};
  rd.get(r.failed);
  rd.get(r.error);
  rd.get(r.message);
  rd.get(r.activities);
  rd.get(r.flows);
  rd.get(r.a2a_model);
  rd.get(r.start);
  rd.get(r.end);
  rd.get(r.wait);
  return r;
}

[[noreturn]] void os_failure(const std::string& what) {
  throw std::runtime_error("simulation process: " + what + ": " + std::strerror(errno));
}

}  // namespace

RawReplay simulate_isolated(const schedule::Plan& plan, const PlatformSpec& platform, const CostModel& costs,
                            const ReplayOptions& options) {
  std::cout.flush();
  std::cerr.flush();
  const io::Child child = io::spawn_child(
      [&](int fd) {
        RawReplay raw;
        try {
          raw = simulate(plan, platform, costs, options);
        } catch (const std::exception& e) {
          raw.failed = true;
          raw.message = e.what();
        }
        const std::string bytes = encode(raw);
        if (!io::write_all(fd, bytes.data(), bytes.size())) ::_exit(3);
      },
      "simulation process");
  std::string bytes;
  try {
    bytes = io::read_all(child.fd, "simulation process");
  } catch (...) {
    io::wait_child(child.pid);
    throw;
  }
  const int status = io::wait_child(child.pid);
  if (status < 0) os_failure("waitpid");
  if (WIFSIGNALED(status))
    throw SimError(SimErrorCode::BadPlatform,
                   "the simulation stopped inside SimGrid (signal " + std::to_string(WTERMSIG(status)) +
                       "); SimGrid's reason is printed above (on an XML platform: check its routes, link "
                       "bandwidths and zone routing)");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("simulation process failed with exit code " + std::to_string(WEXITSTATUS(status)));
  return decode(bytes);
}

}  // namespace ht::sim::detail
