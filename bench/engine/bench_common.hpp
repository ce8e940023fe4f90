// Shared by the engine benchmarks: the fastest-of-N timer and the PyTorch peer's JSON.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace ht::bench {

// Fastest of `reps` timed calls after one warm-up call, in ms: on a shared machine other load
// only ever adds time, so the minimum is the steadiest estimate (torch_train_step.py does the same).
template <class F>
double fastest_ms(int reps, F&& f) {
  using Clock = std::chrono::steady_clock;
  f();
  double best = 0;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    best = i == 0 ? ms : std::min(best, ms);
  }
  return best;
}

// Runs `cmd` (the PyTorch peer) and parses what it prints as JSON; an empty object, with a line
// on stderr, when it printed none.
inline nlohmann::json run_json_command(const std::string& cmd) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string text;
  if (pipe) {
    char buf[4096];
    while (std::fgets(buf, sizeof buf, pipe.get())) text += buf;
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception&) {
    std::cerr << "PyTorch peer unavailable (" << cmd << " printed no JSON)\n";
    return nlohmann::json::object();
  }
}

}  // namespace ht::bench
