// bench_startup: the start-up cost of hybrid-twin commands beside a trivial process (/bin/true),
// measured as a shell user pays it: fork, exec, run, exit. For each command, N runs (default 30):
// median and best wall time, and the peak resident memory the kernel reports (wait4's ru_maxrss).
// The pattern command is the one a script calls hundreds of times; `simulate` opens the twin's
// plugin (SimGrid) on top. Figures, then ratios against /bin/true measured in the same run.
//   bench_startup [--runs N] [--bin PATH]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Figures {
  double median_ms = 0, best_ms = 0, peak_mb = 0;
};

Figures measure(const std::vector<std::string>& cmd, int runs) {
  std::vector<double> ms;
  long peak_kb = 0;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      std::exit(2);
    }
    if (pid == 0) {
      std::vector<char*> argv;
      for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
      execv(argv[0], argv.data());
      _exit(127);
    }
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_startup: '%s' failed (status %d)\n", cmd[0].c_str(), status);
      std::exit(1);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    peak_kb = std::max(peak_kb, usage.ru_maxrss);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), peak_kb / 1024.0};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 30;
  std::string bin = HT_BENCH_BIN;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--bin" && i + 1 < argc) {
      bin = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_startup [--runs N] [--bin PATH]\n");
      return 2;
    }
  }
  const Figures base = measure({"/bin/true"}, runs);
  const Figures pattern = measure({bin, "pattern", "M*"}, runs);
  const Figures help = measure({bin, "--help"}, runs);
  const Figures sim = measure({bin, "simulate", "--pattern", "M*-", "--dp", "2"}, runs);
  std::printf("start-up cost, %d runs each (median / best wall ms, peak resident MB)\n", runs);
  std::printf("%-40s %9s %9s %9s %14s %12s\n", "command", "median", "best", "peak MB", "x /bin/true", "+MB");
  const auto row = [&](const char* name, const Figures& f) {
    std::printf("%-40s %9.2f %9.2f %9.1f %14.1f %12.1f\n", name, f.median_ms, f.best_ms, f.peak_mb,
                f.median_ms / base.median_ms, f.peak_mb - base.peak_mb);
  };
  row("/bin/true", base);
  row("hybrid-twin pattern 'M*'", pattern);
  row("hybrid-twin --help (opens plugins)", help);
  row("hybrid-twin simulate --pattern 'M*-'", sim);
  std::printf("target (issue 31): pattern under 20 ms and 20 MB: %s\n",
              pattern.median_ms < 20 && pattern.peak_mb < 20 ? "met" : "NOT met");
  return 0;
}
