// SIGINT and SIGTERM without half-written files. install_interrupt_handlers() (called once by the
// CLI) makes the default behaviour: the temporary files of writes in progress are removed, then
// the process dies of the signal as before (a shell still sees 130 / 143). A long job that can
// stop cleanly (training with checkpoints) holds a DeferredInterrupts: the first signal is then
// only recorded; output writes in progress abandon themselves (IoError Interrupted, the previous
// file untouched) and the job polls interrupt_signal() between steps to stop with exit code
// 128 + signal. A second signal ends the process at once, as in the default.
#pragma once

namespace ht::io {

void install_interrupt_handlers();

class DeferredInterrupts {
 public:
  DeferredInterrupts();
  ~DeferredInterrupts();
  DeferredInterrupts(const DeferredInterrupts&) = delete;
  DeferredInterrupts& operator=(const DeferredInterrupts&) = delete;
};

// The signal recorded while interrupts were deferred (SIGINT, SIGTERM), or 0.
int interrupt_signal();
// "SIGINT" / "SIGTERM" for messages.
const char* signal_name(int signal);
// Throws IoError(Interrupted) naming `doing` when a signal is recorded.
void throw_if_interrupted(const char* doing);

namespace detail {
// Temporary files the signal handler removes; a slot index, or -1 when all slots are taken (the
// file is then only removed by the writer itself).
int register_temporary(const char* path);
void unregister_temporary(int slot);
}  // namespace detail

}  // namespace ht::io
