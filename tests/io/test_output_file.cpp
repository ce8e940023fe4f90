// Atomic output (ht/io/output_file.hpp, interrupt.hpp): the target is replaced only by a complete
// file; non-regular targets (devices, FIFOs, directories, symlinks to them) are refused and left
// as they were; a symlink to a regular file is written through and kept; failures name the
// user's path and the OS's reason and leave no temporary file; a deferred SIGINT abandons a write
// in progress and keeps the old content.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>
#include <unistd.h>

#include "ht/io/error.hpp"
#include "ht/io/interrupt.hpp"
#include "ht/io/output_file.hpp"

namespace fs = std::filesystem;
using namespace ht::io;

namespace {

struct Folder {
  fs::path path;
  Folder() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("ht-io-out-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string content(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("an output replaces a regular file and leaves nothing else", "[io]") {
  Folder d;
  std::ofstream(d.path / "out.json") << "old";
  write_output_file(d.path / "out.json", "plan file", "new");
  CHECK(content(d.path / "out.json") == "new");
  CHECK(d.names() == std::vector<std::string>{"out.json"});
}

TEST_CASE("non-regular targets are refused and left as they were", "[io]") {
  Folder d;
  REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
  fs::create_directories(d.path / "dir");
  fs::create_symlink("/dev/null", d.path / "null");
  for (const char* name : {"fifo", "dir", "null"}) {
    CHECK_THROWS_WITH(write_output_file(d.path / name, "trace", "x"), Catch::Contains("refusing to replace it"));
    CHECK_THROWS_AS(check_output_file(d.path / name, "trace"), IoError);
  }
  CHECK(fs::is_fifo(d.path / "fifo"));
  CHECK(fs::is_directory(d.path / "dir"));
  CHECK(fs::is_symlink(d.path / "null"));
  CHECK(d.names() == std::vector<std::string>{"dir", "fifo", "null"});
}

TEST_CASE("a symlink to a regular file is written through and kept", "[io]") {
  Folder d;
  std::ofstream(d.path / "real") << "old";
  fs::create_symlink("real", d.path / "link");
  write_output_file(d.path / "link", "SVG", "new");
  CHECK(fs::is_symlink(d.path / "link"));
  CHECK(content(d.path / "real") == "new");
}

TEST_CASE("failures name the user's path and the reason, and leave no temporary file", "[io]") {
  Folder d;
  CHECK_THROWS_WITH(write_output_file(d.path / "no" / "x.json", "trace", "x"),
                    Catch::Contains("x.json") && Catch::Contains("does not exist") && !Catch::Contains(".tmp-"));
  std::ofstream(d.path / "keep") << "old";
  CHECK_THROWS_WITH(write_output_file(d.path / "keep", "trace", [](std::ostream& out) {
                      out << "partial";
                      throw std::runtime_error("the writer failed");
                    }),
                    "the writer failed");
  CHECK(content(d.path / "keep") == "old");
  CHECK(d.names() == std::vector<std::string>{"keep"});
}

TEST_CASE("a write to a full device fails with the OS's reason", "[io]") {
  // /dev/full is refused as a target; its full-disk behaviour is what a full file system gives
  // a file in it, checked with a real tmpfs by the bad-input corpus (tests/badinput).
  CHECK_THROWS_WITH(write_output_file("/dev/full", "trace", "x"), Catch::Contains("a character device"));
}

TEST_CASE("output folders are created and probed before any work", "[io]") {
  Folder d;
  check_output_directory(d.path / "a" / "b", "checkpoint directory");
  CHECK(fs::is_directory(d.path / "a" / "b"));
  CHECK(fs::is_empty(d.path / "a" / "b"));
  std::ofstream(d.path / "file") << "x";
  CHECK_THROWS_WITH(check_output_directory(d.path / "file", "checkpoint directory"), Catch::Contains("not a directory"));
  check_output_file(d.path / "new.json", "plan file");
  CHECK_FALSE(fs::exists(d.path / "new.json"));
}

TEST_CASE("a deferred SIGINT abandons the write in progress and keeps the old file", "[io]") {
  install_interrupt_handlers();
  Folder d;
  std::ofstream(d.path / "ckpt") << "old";
  {
    DeferredInterrupts deferred;
    CHECK(interrupt_signal() == 0);
    try {
      write_output_file(d.path / "ckpt", "checkpoint file", [](std::ostream& out) {
        out << std::string(1 << 20, 'a');
        std::raise(SIGINT);  // recorded, not fatal, while deferred
        out << std::string(1 << 20, 'b');
      });
      FAIL("the write was not abandoned");
    } catch (const IoError& e) {
      CHECK(e.code() == IoErrorCode::Interrupted);
      CHECK_THAT(e.what(), Catch::Contains("SIGINT") && Catch::Contains("left as it was"));
    }
    CHECK(interrupt_signal() == SIGINT);
  }
  CHECK(content(d.path / "ckpt") == "old");
  CHECK(d.names() == std::vector<std::string>{"ckpt"});
}
