// Shared by the libFuzzer targets: run one reader on fuzz input and hold it to its contract. A
// reader may succeed or throw the error types its header promises; any other exception is a bug
// (abort, which libFuzzer reports as a crash), and ASan/UBSan catch memory and undefined
// behaviour on the way.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace ht::fuzz {

// Runs step; exceptions of the listed types are accepted outcomes.
template <class... Allowed, class Step>
void expect_only(const char* what, Step&& step) {
  try {
    step();
  } catch (const std::exception& e) {
    if ((dynamic_cast<const Allowed*>(&e) || ...)) return;
    std::fprintf(stderr, "%s threw an exception outside its contract: %s\n", what, e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "%s threw a non-std exception\n", what);
    std::abort();
  }
}

inline void require(bool ok, const char* invariant) {
  if (ok) return;
  std::fprintf(stderr, "invariant broken: %s\n", invariant);
  std::abort();
}

}  // namespace ht::fuzz
