// Signal handling for outputs (see interrupt.hpp). The handler only uses async-signal-safe calls
// (unlink, sigaction, raise) on a fixed table of paths, so it may run in any thread at any time.
#include "ht/io/interrupt.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

#include <unistd.h>

#include "ht/io/error.hpp"

namespace ht::io {
namespace {

constexpr int kSlots = 16;
constexpr std::size_t kPathMax = 4096;

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 holds a path
  char path[kPathMax];
};

Slot g_slots[kSlots];
std::atomic<int> g_deferred{0};
std::atomic<int> g_pending{0};

void remove_temporaries() {
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
}

extern "C" void on_signal(int sig) {
  if (g_deferred.load() > 0) {
    int expected = 0;
    if (g_pending.compare_exchange_strong(expected, sig)) return;  // the first one: recorded
  }
  remove_temporaries();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

}  // namespace

void install_interrupt_handlers() {
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // other code (threads, condition variables) never sees EINTR
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      // A signal the parent set to be ignored (nohup, background jobs of some shells) stays ignored.
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      ::sigaction(sig, &sa, nullptr);
    }
    return true;
  }();
  (void)installed;
}

DeferredInterrupts::DeferredInterrupts() { g_deferred.fetch_add(1); }
DeferredInterrupts::~DeferredInterrupts() { g_deferred.fetch_sub(1); }

int interrupt_signal() { return g_pending.load(); }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

void throw_if_interrupted(const char* doing) {
  if (const int sig = interrupt_signal())
    throw IoError(IoErrorCode::Interrupted, std::string("interrupted by ") + signal_name(sig) + " while " + doing);
}

namespace detail {

int register_temporary(const char* path) {
  if (std::strlen(path) >= kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::strcpy(g_slots[i].path, path);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0, std::memory_order_release);
}

}  // namespace detail
}  // namespace ht::io
