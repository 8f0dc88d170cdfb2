// Bad launches under mpirun, driven from one process: ranks started with different configs
// (rtx-train, MPMD) are refused with a message naming both values; a rank killed or stopped
// mid-run ends the job with an error within the timeout instead of a hang.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <string>

#include "rtx/dist/comm.hpp"
#include "test_util.hpp"

namespace {

const char* kRoot = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1";

bool can_launch() {
  if (!rtx::dist::have_mpi()) return false;
  return rtx::test::run(std::string(RTX_MPIEXEC) + " --version").exit_code == 0;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("mpirun: ranks with different configs are refused", "[cpu]") {
  if (!can_launch()) {
    WARN("SKIPPED: built without MPI or no mpiexec");
    return;
  }
  const std::string dir = rtx::test::temp_dir();
  const std::string train = rtx::test::tool_path("rtx-train");
  REQUIRE(rtx::test::run(train + " prepare --tokenizer char " + rtx::test::data_dir() + "/tinyshakespeare/input.txt -o " +
                         dir + "/ds -q")
              .exit_code == 0);
  const std::string args = " run --data " + dir + "/ds --preset shakespeare-char-cpu --steps 3 --batch 2 --seq-len 16 "
                           "--eval-iters 0 --threads 1 --dist-timeout 20 -q";
  // MPMD: rank 0 with --lr 0.001, rank 1 with --lr 0.002.
  rtx::test::Proc p;
  const double s = seconds_of([&] {
    p = rtx::test::run(std::string(RTX_MPIEXEC) + " -n 1 " + train + args + " --lr 0.001 : -n 1 " + train + args +
                           " --lr 0.002",
                       kRoot);
  });
  INFO(p.err);
  CHECK(p.exit_code == 2);
  CHECK(p.err.find("ranks disagree on the run config") != std::string::npos);
  CHECK(p.err.find("first difference at 'lr'") != std::string::npos);
  CHECK(p.err.find("0.002") != std::string::npos);
  CHECK(s < 20);
}

TEST_CASE("mpirun: a rank killed mid-run ends the job with an error", "[cpu]") {
  if (!can_launch()) {
    WARN("SKIPPED: built without MPI or no mpiexec");
    return;
  }
  rtx::test::Proc p;
  const double s = seconds_of([&] {
    p = rtx::test::run(std::string(RTX_MPIEXEC) + " -n 2 " + RTX_DIST_MPI_TEST + " \"[.kill]\"",
                       std::string(kRoot) + " RTX_DIST_TIMEOUT=5 OMP_NUM_THREADS=1");
  });
  INFO(p.out << p.err);
  CHECK(p.exit_code != 0);
  CHECK(s < 30);
  // OpenMPI's mpirun notices the dead rank and ends the job, saying so.
  CHECK((p.err + p.out).find("signal 9") != std::string::npos);
}

TEST_CASE("mpirun: a rank that stops mid-run makes the others fail at the timeout", "[cpu]") {
  if (!can_launch()) {
    WARN("SKIPPED: built without MPI or no mpiexec");
    return;
  }
  rtx::test::Proc p;
  const double s = seconds_of([&] {
    p = rtx::test::run(std::string(RTX_MPIEXEC) + " -n 2 " + RTX_DIST_MPI_TEST + " \"[.hang]\"",
                       std::string(kRoot) + " RTX_DIST_TIMEOUT=3 OMP_NUM_THREADS=1");
  });
  INFO(p.out << p.err);
  CHECK(p.exit_code != 0);
  CHECK(s < 30);
  // Catch2 wraps long messages: look for the parts separately.
  CHECK((p.out + p.err).find("did not complete") != std::string::npos);
  CHECK((p.out + p.err).find("allreduce of") != std::string::npos);
}
