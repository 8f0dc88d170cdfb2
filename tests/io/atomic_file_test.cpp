// atomic_write_file / read_text_file tests: content, modes, no leftovers, and the target
// untouched when the write fails (missing directory, directory in the way, file size limit).
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <thread>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rtx/core/error.hpp"
#include "rtx/io/atomic_file.hpp"
#include "test_util.hpp"

using rtx::Error;
using rtx::ErrorCategory;
namespace fs = std::filesystem;

namespace {
std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
template <class F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected rtx::Error");
  return Error(ErrorCategory::Internal, "unreachable");
}
}  // namespace

TEST_CASE("atomic_write_file writes, replaces and leaves no temp files", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/out.json";
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(127), size_t(70000)}) {
    std::string bytes(n, '\0');
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 131 + n) & 0xff);
    rtx::io::atomic_write_file(path, bytes);
    CHECK(slurp(path) == bytes);
    CHECK(entries(dir) == std::vector<std::string>{"out.json"});
  }
  // Replacing keeps the old file's mode.
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  rtx::io::atomic_write_file(path, "new");
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(slurp(path) == "new");
  // A relative path in the current directory works too (parent ".").
  const auto cwd = fs::current_path();
  fs::current_path(dir);
  rtx::io::atomic_write_file("rel.txt", "r");
  fs::current_path(cwd);
  CHECK(slurp(dir + "/rel.txt") == "r");
}

TEST_CASE("atomic_write_file into a missing directory fails cleanly", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string path = dir + "/missing/out.json";
  Error e = catch_error([&] { rtx::io::atomic_write_file(path, "x"); });
  CHECK(e.category() == ErrorCategory::Environment);
  CHECK(e.where() == path);
  CHECK(std::string(e.what()).find("No such file or directory") != std::string::npos);
  CHECK(!fs::exists(dir + "/missing"));
  CHECK(entries(dir).empty());
}

TEST_CASE("atomic_write_file failing mid-way leaves the target untouched and no temp", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  SECTION("a directory as the target is refused before anything is written") {
    const std::string path = dir + "/target";
    fs::create_directories(path + "/inner");
    Error e = catch_error([&] { rtx::io::atomic_write_file(path, "payload"); });
    CHECK(e.category() == ErrorCategory::Usage);
    CHECK(e.where() == path);
    CHECK(std::string(e.what()).find("is a directory") != std::string::npos);
    CHECK(fs::is_directory(path + "/inner"));
    CHECK(entries(dir) == std::vector<std::string>{"target"});
  }
  SECTION("a write past RLIMIT_FSIZE fails (EFBIG), even for root") {
    const std::string path = dir + "/keep.txt";
    rtx::io::atomic_write_file(path, "original");
    struct rlimit old {};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 1024;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    std::string msg;
    ErrorCategory cat = ErrorCategory::Internal;
    try {
      rtx::io::atomic_write_file(path, std::string(8192, 'z'));
    } catch (const Error& e) {
      msg = e.what();
      cat = e.category();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    INFO(msg);
    CHECK(cat == ErrorCategory::Environment);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("File too large") != std::string::npos);
    CHECK(slurp(path) == "original");
    CHECK(entries(dir) == std::vector<std::string>{"keep.txt"});
  }
}

TEST_CASE("read_text_file reads bytes and names the path on errors", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  const std::string bytes = std::string("a\0b\nc", 5);
  rtx::io::atomic_write_file(dir + "/f", bytes);
  CHECK(rtx::io::read_text_file(dir + "/f") == bytes);
  rtx::io::atomic_write_file(dir + "/empty", "");
  CHECK(rtx::io::read_text_file(dir + "/empty").empty());
  Error e = catch_error([&] { rtx::io::read_text_file(dir + "/nope.json"); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(std::string(e.what()).find(dir + "/nope.json") != std::string::npos);
  e = catch_error([&] { rtx::io::read_text_file(dir); });
  CHECK(e.category() == ErrorCategory::Input);
  CHECK(std::string(e.what()).find("directory") != std::string::npos);
}

TEST_CASE("read_text_file(\"-\") and write_text_output(\"-\") use stdin/stdout", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  rtx::io::write_text_output(dir + "/via_file", "file path");
  CHECK(slurp(dir + "/via_file") == "file path");
  // Redirect stdin from a file for the duration of the read.
  rtx::io::atomic_write_file(dir + "/in", "from stdin\n");
  REQUIRE(std::freopen((dir + "/in").c_str(), "r", stdin) != nullptr);
  CHECK(rtx::io::read_text_file("-") == "from stdin\n");
}

TEST_CASE("atomic_write_file follows symlinks and never replaces devices or FIFOs", "[cpu]") {
  const std::string dir = rtx::test::temp_dir();
  SECTION("a symlink stays a link; its target gets the new content") {
    rtx::io::atomic_write_file(dir + "/real.json", "old");
    fs::create_symlink("real.json", dir + "/link.json");
    rtx::io::atomic_write_file(dir + "/link.json", "new");
    CHECK(fs::is_symlink(dir + "/link.json"));
    CHECK(rtx::io::read_text_file(dir + "/real.json") == "new");
  }
  SECTION("a FIFO is written in place, not replaced") {
    const std::string fifo = dir + "/pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string got;
    std::thread reader([&] { got = rtx::io::read_text_file(fifo); });
    rtx::io::atomic_write_file(fifo, "through the pipe");
    reader.join();
    CHECK(got == "through the pipe");
    CHECK(fs::is_fifo(fifo));
  }
}
