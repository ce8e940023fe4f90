// Temp file + rename, refusing non-regular targets (see output_file.hpp).
#include "ht/io/output_file.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <streambuf>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ht/io/error.hpp"
#include "ht/io/interrupt.hpp"

namespace ht::io {
namespace {

std::string folder_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// The file the rename must replace: `path` itself, or the regular file a symlink leads to (the
// link is kept). Refuses anything else.
std::string resolve_target(const std::string& path, const std::string& what) {
  if (path.empty()) throw IoError(IoErrorCode::Open, "no " + what + " path given (empty path)");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return path;  // a new file; a missing folder is reported by the write
    throw IoError(IoErrorCode::Open, "cannot write " + what + " " + quote_path(path) + ": " + std::strerror(errno));
  }
  // A file nobody may write is one its owner keeps: refuse it as a redirection would (even as root).
  auto refuse_read_only = [&](const struct stat& file) {
    if ((file.st_mode & 0222) == 0)
      throw IoError(IoErrorCode::Open, what + " " + quote_path(path) +
                                           " is read-only; refusing to replace it (make it writable or remove it first)");
  };
  if (S_ISREG(st.st_mode)) {
    refuse_read_only(st);
    return path;
  }
  if (S_ISLNK(st.st_mode)) {
    // /dev/stdout, /dev/fd/N, /proc/self/fd/N: a stream of this process, not a file to replace (a
    // rename would put the output over whatever the stream was redirected to, and drop the rest).
    char link[PATH_MAX];
    const ssize_t n = ::readlink(path.c_str(), link, sizeof link - 1);
    const std::string target_text = n > 0 ? std::string(link, static_cast<std::size_t>(n)) : std::string();
    if (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0 || target_text.rfind("/proc/", 0) == 0)
      throw IoError(IoErrorCode::NotRegular, what + " " + quote_path(path) +
                                                 " is a stream of this process, not a file; refusing to write through "
                                                 "it (give a file path)");
    struct stat to {};
    if (::stat(path.c_str(), &to) != 0)
      throw IoError(IoErrorCode::NotRegular,
                    what + " " + quote_path(path) + " is a symbolic link to a missing file; refusing to write through it");
    if (!S_ISREG(to.st_mode))
      throw IoError(IoErrorCode::NotRegular, what + " " + quote_path(path) + " is a symbolic link to " +
                                                 kind_of(to.st_mode) + "; refusing to replace it");
    refuse_read_only(to);
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) == nullptr)
      throw IoError(IoErrorCode::Open, "cannot resolve " + what + " " + quote_path(path) + ": " + std::strerror(errno));
    return resolved;
  }
  throw IoError(IoErrorCode::NotRegular,
                what + " " + quote_path(path) + " is " + kind_of(st.st_mode) + ", not a regular file; refusing to replace it");
}

std::string why_folder(const std::string& path, int err) {
  std::string reason = std::strerror(err);
  if (err == ENOENT) reason += " (its folder " + quote_path(folder_of(path)) + " does not exist)";
  return reason;
}

// A new, exclusive temporary file beside `target`, registered for removal on SIGINT/SIGTERM.
struct Temporary {
  std::string path;
  int fd = -1;
  int slot = -1;
  bool committed = false;  // renamed into place: nothing to remove

  Temporary(const std::string& target, const std::string& user_path, const std::string& what) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      path = target + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
      fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0666);
      if (fd >= 0) break;
      if (errno != EEXIST)
        throw IoError(IoErrorCode::Write, "cannot write " + what + " " + quote_path(user_path) + ": " +
                                              why_folder(user_path, errno));
    }
    if (fd < 0) throw IoError(IoErrorCode::Write, "cannot create a temporary file beside " + quote_path(user_path));
    slot = detail::register_temporary(path.c_str());
  }
  void discard() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    ::unlink(path.c_str());
    committed = true;
    detail::unregister_temporary(slot);
    slot = -1;
  }
  ~Temporary() {
    if (!committed) discard();
  }
};

// An ostream buffer over the temporary file's descriptor that remembers the first OS error and
// gives up between chunks once a deferred SIGINT/SIGTERM is recorded.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof buffer_); }
  int error() const { return error_; }
  bool interrupted() const { return interrupted_; }
  bool flush_all() { return sync() == 0; }

 protected:
  int_type overflow(int_type c) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(sizeof buffer_) / 2) return std::streambuf::xsputn(s, n);
    if (sync() != 0 || !write_all(s, static_cast<std::size_t>(n))) return 0;  // big chunks go straight out
    return n;
  }
  int sync() override {
    const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    if (n > 0 && !write_all(pbase(), n)) return -1;
    setp(buffer_, buffer_ + sizeof buffer_);
    return 0;
  }

 private:
  bool write_all(const char* p, std::size_t n) {
    if (error_ != 0 || interrupted_) return false;
    while (n > 0) {
      if (interrupt_signal() != 0) {
        interrupted_ = true;
        return false;
      }
      const std::size_t chunk = n < (std::size_t{8} << 20) ? n : (std::size_t{8} << 20);
      const ssize_t w = ::write(fd_, p, chunk);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        error_ = errno;
        return false;
      }
      if (w == 0) {  // nothing taken and no reason given (some FUSE file systems): retrying spins
        error_ = EIO;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }

  int fd_;
  int error_ = 0;
  bool interrupted_ = false;
  char buffer_[1 << 16];
};

void probe_folder(const std::string& path, const std::string& what) {
  Temporary probe(path, path, what);
  probe.discard();
}

}  // namespace

void check_output_file(const std::filesystem::path& path, std::string_view what) {
  const std::string target = resolve_target(path.string(), std::string(what));
  probe_folder(target, std::string(what));
}

void check_distinct_outputs(const std::vector<std::pair<std::filesystem::path, std::string>>& outputs) {
  std::vector<std::pair<std::filesystem::path, std::string>> seen;
  for (const auto& [path, what] : outputs) {
    if (path.empty()) continue;
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(path, ec).lexically_normal();
    std::filesystem::path canonical = std::filesystem::weakly_canonical(absolute, ec);
    if (ec) canonical = absolute;
    for (const auto& [other, other_what] : seen)
      if (other == canonical)
        throw IoError(IoErrorCode::Open, other_what + " and " + what + " name the same file " +
                                             quote_path(path.string()) + "; give each its own");
    seen.emplace_back(canonical, what);
  }
}

void check_output_directory(const std::filesystem::path& dir, std::string_view what) {
  const std::string d = dir.string(), w(what);
  if (d.empty()) throw IoError(IoErrorCode::Open, "no " + w + " path given (empty path)");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  struct stat st {};
  if (::stat(d.c_str(), &st) != 0)
    throw IoError(IoErrorCode::Write, "cannot create " + w + " " + quote_path(d) + ": " +
                                          (ec ? ec.message() : std::string(std::strerror(errno))));
  if (!S_ISDIR(st.st_mode))
    throw IoError(IoErrorCode::NotRegular, w + " " + quote_path(d) + " is " + kind_of(st.st_mode) + ", not a directory");
  probe_folder((dir / ".write-probe").string(), w + " " + quote_path(d) + " (a new file in it)");
}

void write_output_file(const std::filesystem::path& path, std::string_view what,
                       const std::function<void(std::ostream&)>& body, OutputOptions options) {
  const std::string user = path.string(), w(what);
  const std::string target = resolve_target(user, w);
  Temporary temp(target, user, w);
  FdBuffer buffer(temp.fd);
  {
    std::ostream out(&buffer);
    body(out);  // an exception leaves through ~Temporary, which removes the file
    out.flush();
  }
  buffer.flush_all();
  if (buffer.interrupted())
    throw IoError(IoErrorCode::Interrupted, std::string("interrupted by ") + signal_name(interrupt_signal()) +
                                                " while writing " + w + " " + quote_path(user) + "; it was left as it was");
  if (buffer.error() != 0)
    throw IoError(IoErrorCode::Write, "cannot write " + w + " " + quote_path(user) + ": " + std::strerror(buffer.error()));
  if (options.durable && ::fsync(temp.fd) != 0)
    throw IoError(IoErrorCode::Write, "cannot write " + w + " " + quote_path(user) + ": " + std::strerror(errno));
  const int fd = temp.fd;
  temp.fd = -1;
  if (::close(fd) != 0)  // NFS and some full disks report the failure only here
    throw IoError(IoErrorCode::Write, "cannot write " + w + " " + quote_path(user) + ": " + std::strerror(errno));
  if (::rename(temp.path.c_str(), target.c_str()) != 0)
    throw IoError(IoErrorCode::Write, "cannot write " + w + " " + quote_path(user) + ": " + std::strerror(errno));
  temp.committed = true;
  detail::unregister_temporary(temp.slot);
  temp.slot = -1;
  if (options.durable) {
    const int dir = ::open(folder_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);  // best effort: some file systems cannot fsync a folder
      ::close(dir);
    }
  }
}

void write_output_file(const std::filesystem::path& path, std::string_view what, std::string_view content,
                       OutputOptions options) {
  write_output_file(path, what, [&](std::ostream& out) { out.write(content.data(), static_cast<std::streamsize>(content.size())); },
                    options);
}

}  // namespace ht::io
