// Forked children that report through a pipe (see child_process.hpp).
#include "ht/io/child_process.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ht::io {

Child spawn_child(const std::function<void(int write_fd)>& body, const std::string& what, bool stderr_to_pipe) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(what + ": pipe: " + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw std::runtime_error(what + ": fork: " + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    if (stderr_to_pipe) {
      ::dup2(fds[1], 2);
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) ::dup2(null, 1);
    }
    int code = 0;
    try {
      body(fds[1]);
    } catch (...) {
      code = 3;
    }
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(code);  // no destructors or atexit handlers of the parent's state in the child
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

long read_some(int fd, void* buffer, std::size_t size) {
  for (;;) {
    const ssize_t n = ::read(fd, buffer, size);
    if (n < 0 && errno == EINTR) continue;
    return static_cast<long>(n);
  }
}

std::string read_all(int fd, const std::string& what) {
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const long n = read_some(fd, buf, sizeof buf);
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(what + ": read: " + std::strerror(err));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

int run_capture_stderr(const std::string& path, const std::vector<std::string>& args, std::string& err) {
  Child child;
  try {
    child = spawn_child(
        [&](int) {
          std::vector<char*> argv;
          argv.push_back(const_cast<char*>(path.c_str()));
          for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
          argv.push_back(nullptr);
          ::execv(path.c_str(), argv.data());
          ::_exit(127);
        },
        path, true);
    err += read_all(child.fd, path);
  } catch (const std::runtime_error&) {
    if (child.pid > 0) wait_child(child.pid);
    return -1;
  }
  const int status = wait_child(child.pid);
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace ht::io
