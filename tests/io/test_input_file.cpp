// Bounded input (ht/io/input_file.hpp, json_input.hpp): regular files are read whole; FIFOs,
// devices and directories are refused at once (a FIFO without a writer must not block), files
// over the limit are refused before a byte is read, and JSON nested past the limit is refused
// by the linear pre-scan with the source named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>

#include "ht/io/error.hpp"
#include "ht/io/input_file.hpp"
#include "ht/io/json_input.hpp"

namespace fs = std::filesystem;
using namespace ht::io;

namespace {

struct Folder {
  fs::path path;
  Folder() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("ht-io-in-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
};

IoErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.code();
  }
  FAIL("no IoError");
  return IoErrorCode::Open;
}

}  // namespace

TEST_CASE("a regular file is read whole, a symlink to one too", "[io]") {
  Folder d;
  std::ofstream(d.path / "a.txt") << "hello";
  CHECK(read_input_file(d.path / "a.txt", 100, "text") == "hello");
  fs::create_symlink(d.path / "a.txt", d.path / "link");
  CHECK(read_input_file(d.path / "link", 100, "text") == "hello");
}

TEST_CASE("FIFOs, devices and directories are refused without reading", "[io]") {
  Folder d;
  REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);  // no writer: opening must not block
  CHECK(code_of([&] { read_input_file(d.path / "fifo", 100, "text"); }) == IoErrorCode::NotRegular);
  CHECK(code_of([&] { read_input_file("/dev/zero", 100, "text"); }) == IoErrorCode::NotRegular);
  CHECK(code_of([&] { read_input_file(d.path, 100, "text"); }) == IoErrorCode::NotRegular);
  fs::create_symlink("/dev/zero", d.path / "zero");
  CHECK_THROWS_WITH(read_input_file(d.path / "zero", 100, "model file"),
                    Catch::Contains("model file") && Catch::Contains("a character device, not a regular file"));
  CHECK(code_of([&] { read_input_file(d.path / "missing", 100, "text"); }) == IoErrorCode::Open);
}

TEST_CASE("a file over the limit is refused before it is read", "[io]") {
  Folder d;
  { std::ofstream(d.path / "big") << std::string(101, 'x'); }
  CHECK(code_of([&] { read_input_file(d.path / "big", 100, "text"); }) == IoErrorCode::TooLarge);
  CHECK_THROWS_WITH(read_input_file(d.path / "big", 100, "text"), Catch::Contains("more than the limit of 100 bytes"));
  // A sparse file of 1 TiB costs nothing to make and must cost nothing to refuse.
  { std::ofstream(d.path / "sparse"); }
  fs::resize_file(d.path / "sparse", std::uint64_t{1} << 40);
  CHECK_THROWS_WITH(read_input_file(d.path / "sparse", kJsonFileLimit, "text"), Catch::Contains("1024 GiB"));
}

TEST_CASE("read_at reads exact ranges and reports a short file", "[io]") {
  Folder d;
  std::ofstream(d.path / "f") << "0123456789";
  InputFile f(d.path / "f", 100, "file");
  char buf[4];
  f.read_at(3, buf, 4);
  CHECK(std::string(buf, 4) == "3456");
  CHECK(code_of([&] { f.read_at(8, buf, 4); }) == IoErrorCode::Read);
}

TEST_CASE("JSON deeper than the limit is refused by the pre-scan; strings do not count", "[io]") {
  CHECK(parse_json("[[1]]", "x", 2) == nlohmann::json::parse("[[1]]"));
  CHECK(code_of([] { parse_json("[[[1]]]", "x", 2); }) == IoErrorCode::BadJson);
  CHECK(parse_json(R"(["[[[[\"]]]]"])", "x", 1).size() == 1);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_WITH(parse_json(deep, "replay file 'r.json'"), Catch::Contains("replay file 'r.json' nests JSON deeper than 64"));
  CHECK_THROWS_WITH(parse_json("{", "cost file 'c.json'"),
                    Catch::Contains("cost file 'c.json' is not valid JSON") && !Catch::Contains("json.exception"));
}
