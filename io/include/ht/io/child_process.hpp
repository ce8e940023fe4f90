// Child processes that report back through a pipe: the one way the project forks. A child runs a
// function (a replay that SimGrid may crash, a route check that may segfault, a worker of a
// parallel search) or execs another program, writes what it has to say into the pipe, and exits
// without running the parent's destructors or atexit handlers; the parent reads the pipe and
// waits for it. Every read, write and wait retries on EINTR.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ht::io {

struct Child {
  pid_t pid = -1;
  int fd = -1;  // the read end of the child's pipe (the parent closes it, or read_all does)
};

// Forks a child that runs body(write_fd) and exits 0 (3 when body throws or a write fails). The
// parent's stdio buffers are flushed first so the child does not print them again. With
// `stderr_to_pipe` the child's stderr goes into the pipe and its stdout to /dev/null (for a
// child that execs). Throws std::runtime_error naming `what` when the pipe or the fork fails.
Child spawn_child(const std::function<void(int write_fd)>& body, const std::string& what,
                  bool stderr_to_pipe = false);

// Writes all of [data, data + size) to fd; false on an error or a write that takes nothing.
bool write_all(int fd, const void* data, std::size_t size);
// Reads fd to its end and closes it; throws std::runtime_error naming `what` on a read error.
std::string read_all(int fd, const std::string& what);
// One read of up to `size` bytes (retrying EINTR): what read(2) returns.
long read_some(int fd, void* buffer, std::size_t size);
// Waits for the child and returns its wait status (see <sys/wait.h>); -1 when waitpid fails.
int wait_child(pid_t pid);

// Runs `path args` and returns its exit status (-1 when it could not run or did not exit), with
// its stderr in `err` and its stdout discarded.
int run_capture_stderr(const std::string& path, const std::vector<std::string>& args, std::string& err);

}  // namespace ht::io
