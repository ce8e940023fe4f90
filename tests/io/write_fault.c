/* Write-failure injection for tests (issue 30 item 7), loaded with LD_PRELOAD into an unchanged
 * hybrid-twin. It fails the system calls the atomic writer (io/src/output_file.cpp) makes on its
 * temporary files -- the files whose name holds ".tmp-" -- the way a full disk, a flaky network
 * file system or a dying device fails them; every other file, stdout and stderr included, passes
 * through untouched.
 *
 *   HT_WRITE_FAULT=KIND   write-short  the first write writes half its bytes, later ones fail ENOSPC
 *                                      (what a disk that fills up mid-file does)
 *                         write-enospc every write fails ENOSPC
 *                         write-zero   every write reports 0 bytes written (some FUSE file systems)
 *                         fsync        fsync fails EIO (the data never reached the device)
 *                         close        close fails EIO after closing (NFS reports lost writes here)
 *                         rename       rename of a temporary file fails EXDEV
 *   HT_WRITE_FAULT_AT=N   fail only the N-th temporary file the kind applies to (1-based; for
 *                         write-* the N-th file written, for the others the N-th call); default:
 *                         every one.
 *
 * Each injected fault is counted on stderr as "write_fault: KIND on FILE" so a test can tell that
 * it fired. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char* kind(void) {
  const char* k = getenv("HT_WRITE_FAULT");
  return k ? k : "";
}

static long fault_at(void) {
  const char* n = getenv("HT_WRITE_FAULT_AT");
  return n ? strtol(n, NULL, 10) : 0;
}

static int is_temporary(const char* path) { return path && strstr(path, ".tmp-") != NULL; }

/* The path behind a descriptor (empty when it has none). */
static void fd_path(int fd, char* out, size_t size) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, out, size - 1);
  out[n > 0 ? (size_t)n : 0] = '\0';
}

static void report(const char* what, const char* path) {
  char line[PATH_MAX + 64];
  int n = snprintf(line, sizeof line, "write_fault: %s on %s\n", what, path);
  static ssize_t (*real_write)(int, const void*, size_t);
  if (!real_write) real_write = (ssize_t (*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  if (n > 0) real_write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Whether this call (the `ordinal`-th the kind applies to) is one to fail. */
static int chosen(long ordinal) {
  long at = fault_at();
  return at <= 0 || ordinal == at;
}

ssize_t write(int fd, const void* buf, size_t count) {
  static ssize_t (*real)(int, const void*, size_t);
  static int last_fd = -1;
  static char last_path[PATH_MAX];
  static long files = 0;  /* temporary files written so far */
  static long writes_to_last = 0;
  if (!real) real = (ssize_t (*)(int, const void*, size_t))dlsym(RTLD_NEXT, "write");
  const char* k = kind();
  if (strncmp(k, "write-", 6) != 0 || fd <= 2 || count == 0) return real(fd, buf, count);
  char path[PATH_MAX];
  fd_path(fd, path, sizeof path);
  if (!is_temporary(path)) return real(fd, buf, count);
  if (fd != last_fd || strcmp(path, last_path) != 0) {  /* a new temporary file */
    last_fd = fd;
    snprintf(last_path, sizeof last_path, "%s", path);
    ++files;
    writes_to_last = 0;
  }
  ++writes_to_last;
  if (!chosen(files)) return real(fd, buf, count);
  if (strcmp(k, "write-short") == 0 && writes_to_last == 1) {
    report(k, path);
    return real(fd, buf, count > 1 ? count / 2 : count);
  }
  if (strcmp(k, "write-zero") == 0) {
    report(k, path);
    return 0;
  }
  report(k, path);
  errno = ENOSPC;
  return -1;
}

int fsync(int fd) {
  static int (*real)(int);
  static long calls = 0;
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  if (strcmp(kind(), "fsync") != 0) return real(fd);
  char path[PATH_MAX];
  fd_path(fd, path, sizeof path);
  if (!is_temporary(path) || !chosen(++calls)) return real(fd);
  report("fsync", path);
  errno = EIO;
  return -1;
}

int close(int fd) {
  static int (*real)(int);
  static long calls = 0;
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
  if (strcmp(kind(), "close") != 0) return real(fd);
  char path[PATH_MAX];
  fd_path(fd, path, sizeof path);
  const int rc = real(fd);
  if (rc != 0 || !is_temporary(path) || !chosen(++calls)) return rc;
  report("close", path);
  errno = EIO;
  return -1;
}

int rename(const char* from, const char* to) {
  static int (*real)(const char*, const char*);
  static long calls = 0;
  if (!real) real = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  if (strcmp(kind(), "rename") != 0 || !is_temporary(from) || !chosen(++calls)) return real(from, to);
  report("rename", from);
  errno = EXDEV;
  return -1;
}
