// The twin's process pool (see process_pool.hpp).
#include "process_pool.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "ht/io/child_process.hpp"
#include "whatif.hpp"

namespace ht::cli {

std::vector<nlohmann::json> parallel_map(
    const std::vector<int>& items, int workers, const std::string& what, const std::function<nlohmann::json(int)>& fn,
    const std::function<std::string(const std::vector<nlohmann::json>&)>& describe) {
  std::vector<nlohmann::json> out(items.size());
  if (items.empty()) return out;
  workers = std::max(1, std::min<int>(workers, static_cast<int>(items.size())));
  struct Worker {
    pid_t pid = -1;
    int fd = -1;
    std::string buffer;
  };
  std::vector<Worker> ws(static_cast<std::size_t>(workers));
  // Items go to whichever worker is free (a counter in memory the workers share), so one slow
  // item does not leave the other workers idle at the end.
  void* shared = mmap(nullptr, sizeof(std::size_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
  auto* next_item = static_cast<std::size_t*>(shared);
  *next_item = 0;
  for (int w = 0; w < workers; ++w) {
    const io::Child child = io::spawn_child(
        [&](int fd) {
          for (std::size_t k; (k = __atomic_fetch_add(next_item, 1, __ATOMIC_RELAXED)) < items.size();) {
            const std::string line = std::to_string(k) + " " + fn(items[static_cast<std::size_t>(k)]).dump() + "\n";
            if (!io::write_all(fd, line.data(), line.size())) ::_exit(3);
          }
        },
        "worker process");
    ws[static_cast<std::size_t>(w)] = {child.pid, child.fd, {}};
  }
  std::size_t received = 0;
  double next_report = 1;  // seconds: one progress line, redrawn at most once a second
  io::log::Progress progress("progress");
  const auto t0 = std::chrono::steady_clock::now();
  int open = workers;
  while (open > 0) {
    std::vector<pollfd> polls;
    for (const auto& w : ws)
      if (w.fd >= 0) polls.push_back({w.fd, POLLIN, 0});
    if (poll(polls.data(), polls.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    for (auto& w : ws) {
      if (w.fd < 0) continue;
      bool ready = false;
      for (const auto& p : polls) ready = ready || (p.fd == w.fd && p.revents != 0);
      if (!ready) continue;
      char chunk[65536];
      const long n = io::read_some(w.fd, chunk, sizeof chunk);
      if (n <= 0) {
        close(w.fd);
        w.fd = -1;
        --open;
        continue;
      }
      w.buffer.append(chunk, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = w.buffer.find('\n')) != std::string::npos;) {
        const std::string line = w.buffer.substr(0, nl);
        w.buffer.erase(0, nl + 1);
        const std::size_t sp = line.find(' ');
        out.at(std::stoul(line.substr(0, sp))) = nlohmann::json::parse(line.substr(sp + 1));
        ++received;
      }
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!what.empty() && elapsed >= next_report) {
        char text[160];
        if (describe) {
          std::snprintf(text, sizeof text, "%s %zu/%zu, %.0f s%s", what.c_str(), received, items.size(), elapsed,
                        describe(out).c_str());
        } else {
          const double left = elapsed / static_cast<double>(received) * static_cast<double>(items.size() - received);
          std::snprintf(text, sizeof text, "%s %zu/%zu, %.0f s, about %.0f s left", what.c_str(), received,
                        items.size(), elapsed, left);
        }
        progress.draw(text, elapsed);
        next_report = elapsed + 1;
      }
    }
  }
  bool failed = false;
  for (const auto& w : ws) {
    const int status = io::wait_child(w.pid);
    failed = failed || status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  munmap(shared, sizeof(std::size_t));
  progress.clear();
  if (failed || received != items.size())
    throw std::runtime_error("a worker process failed (" + std::to_string(received) + " of " +
                             std::to_string(items.size()) + " results)");
  return out;
}

}  // namespace ht::cli
