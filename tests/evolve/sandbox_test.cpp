// The sandbox: limits are applied in the child, a crash / timeout / exec failure is a failed
// run (never an exception), output is captured.
#include <catch2/catch.hpp>

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
  CHECK(r.out == std::to_string((size_t(3) << 30) / 1024) + "\n77\n");
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
