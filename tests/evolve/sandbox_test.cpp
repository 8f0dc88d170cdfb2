// The sandbox: limits are applied in the child, a crash / timeout / exec failure is a failed
// run (never an exception), output is captured.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "rtx/evolve/sandbox.hpp"

using namespace rtx::evolve;

TEST_CASE("evolve sandbox: clean exit, captured output and the limits inside the child", "[cpu]") {
  SandboxOptions o;
  o.address_space_bytes = size_t(3) << 30;
  o.cpu_s = 77;
  const SandboxResult r = run_sandboxed({"/bin/sh", "-c", "ulimit -v; ulimit -t; echo err >&2"}, o);
  REQUIRE(r.clean());
  CHECK(r.failure().empty());
  CHECK(r.out == (address_space_limited() ? std::to_string((size_t(3) << 30) / 1024) : std::string("unlimited")) + "\n77\n");
  CHECK(r.err == "err\n");
  INFO("network isolated: " << r.network_isolated);
  if (r.network_isolated) {
    // In a fresh network namespace only a loopback device (down) exists.
    const SandboxResult n = run_sandboxed({"/bin/sh", "-c", "cat /proc/net/dev | tail -n +3 | wc -l"}, o);
    CHECK(n.out == "1\n");
  }
}

TEST_CASE("evolve sandbox: crash, non-zero exit, timeout and exec failure are failed runs", "[cpu]") {
  SandboxOptions o;
  o.timeout_s = 0.5;
  const SandboxResult seg = run_sandboxed({"/bin/sh", "-c", "kill -SEGV $$"}, o);
  CHECK_FALSE(seg.clean());
  CHECK(seg.signal == 11);
  CHECK_THAT(seg.failure(), Catch::Contains("signal 11"));
  const SandboxResult ex = run_sandboxed({"/bin/sh", "-c", "echo boom >&2; exit 3"}, o);
  CHECK(ex.exit_code == 3);
  CHECK_THAT(ex.failure(), Catch::Contains("exit status 3: boom"));
  const SandboxResult to = run_sandboxed({"/bin/sh", "-c", "sleep 30"}, o);
  CHECK(to.timed_out);
  CHECK(to.wall_s < 5);
  CHECK_THAT(to.failure(), Catch::Contains("timed out"));
  const SandboxResult nx = run_sandboxed({"/nonexistent/rtx-evolve"}, o);
  CHECK(nx.exit_code == 127);
  // The CPU limit kills a spinning child (SIGKILL/SIGXCPU) even without the wall timeout.
  SandboxOptions c;
  c.cpu_s = 1;
  c.timeout_s = 20;
  const SandboxResult spin = run_sandboxed({"/bin/sh", "-c", "while :; do :; done"}, c);
  CHECK_FALSE(spin.clean());
  CHECK_FALSE(spin.timed_out);
  CHECK(spin.signal != 0);
}

TEST_CASE("evolve sandbox: writes confined to the run's scratch folder (Landlock)", "[cpu]") {
  namespace fs = std::filesystem;
  const fs::path outside = fs::temp_directory_path() / ("rtx-sandbox-test-" + std::to_string(::getpid()));
  fs::remove_all(outside);
  fs::create_directories(outside);
  const std::string target = (outside / "escaped").string();
  SandboxOptions o;
  // Inside: the working directory and $TMPDIR are the scratch folder, writable; /dev/null too.
  const SandboxResult in = run_sandboxed(
      {"/bin/sh", "-c", "echo a > here && mkdir d && echo b > \"$TMPDIR/t\" && echo c > /dev/null && cat here \"$TMPDIR/t\" && pwd"}, o);
  REQUIRE(in.clean());
  const std::string cwd = in.out.substr(in.out.find("b\n") + 2);
  CHECK_THAT(cwd, Catch::Contains("rtx-sandbox-"));
  CHECK(in.out.rfind("a\nb\n", 0) == 0);
  CHECK_FALSE(fs::exists(cwd.substr(0, cwd.size() - 1)));  // removed after the run
  // Outside: refused when Landlock is there.
  const SandboxResult out = run_sandboxed({"/bin/sh", "-c", "echo x > '" + target + "'"}, o);
  if (!out.writes_confined) {
    WARN("no Landlock on this kernel: write confinement not exercised");
    CHECK(out.clean());
  } else {
    CHECK_FALSE(out.clean());
    CHECK_THAT(out.failure(), Catch::Contains("Permission denied"));
    CHECK_FALSE(fs::exists(target));
    // Removing, renaming and truncating outside files are refused as well.
    { std::ofstream(outside / "keep") << "keep"; }
    const std::string keep = (outside / "keep").string();
    CHECK_FALSE(run_sandboxed({"/bin/rm", "-f", keep}, o).clean());
    CHECK_FALSE(run_sandboxed({"/bin/mv", keep, keep + "2"}, o).clean());
    CHECK_FALSE(run_sandboxed({"/usr/bin/truncate", "-s", "0", keep}, o).clean());
    CHECK(fs::file_size(keep) == 4);
    // A path listed in `writable` is allowed; confinement off allows everything.
    SandboxOptions w;
    w.writable = {outside.string()};
    CHECK(run_sandboxed({"/bin/sh", "-c", "echo y > '" + target + "'"}, w).clean());
    CHECK(fs::exists(target));
    fs::remove(target);
    SandboxOptions off;
    off.confine_writes = false;
    const SandboxResult free_run = run_sandboxed({"/bin/sh", "-c", "echo z > '" + target + "'"}, off);
    CHECK(free_run.clean());
    CHECK_FALSE(free_run.writes_confined);
    CHECK(fs::exists(target));
  }
  fs::remove_all(outside);
}

TEST_CASE("evolve sandbox: cancel kills the child and its process group at once", "[cpu]") {
  SandboxOptions o;
  o.timeout_s = 60;
  const auto t0 = std::chrono::steady_clock::now();
  o.cancel = [&] { return std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(200); };
  // A shell with a child of its own: the whole group goes.
  const SandboxResult r = run_sandboxed({"/bin/sh", "-c", "sleep 30 & sleep 30; wait"}, o);
  CHECK(r.cancelled);
  CHECK_FALSE(r.timed_out);
  CHECK_FALSE(r.clean());
  CHECK(r.signal == 9);
  CHECK(r.wall_s >= 0.2);
  CHECK(r.wall_s < 2);
  CHECK_THAT(r.failure(), Catch::Contains("killed: the run was interrupted"));
  // Never asked to cancel: runs to its end.
  o.cancel = [] { return false; };
  CHECK(run_sandboxed({"/bin/sh", "-c", "exit 0"}, o).clean());
}
