// The Communicator front end (argument checks, timing, dist.collective telemetry, timeouts),
// the single-process communicator, world() selection and the cross-rank consistency check.
#include "rtx/dist/comm.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/internal.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/telemetry/bus.hpp"

namespace rtx::dist {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string human_bytes(size_t b) {
  char buf[48];
  if (b >= (1u << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1u << 20));
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

double env_timeout() {
  const char* e = std::getenv("RTX_DIST_TIMEOUT");
  if (!e || !*e) return 600;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  if (!end || *end != '\0' || !(v > 0) || !std::isfinite(v))
    throw_usage(std::string("RTX_DIST_TIMEOUT='") + e + "' is not a positive number of seconds", "RTX_DIST_TIMEOUT",
                "e.g. RTX_DIST_TIMEOUT=300");
  return v;
}

bool env_set(const char* name) {
  const char* e = std::getenv(name);
  return e && *e;
}

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return end && *end == '\0' ? static_cast<int>(v) : fallback;
}

}  // namespace

double busbw_factor(const std::string& op, int n) {
  if (n < 1) return 0;
  const double dn = n;
  if (op == "allreduce") return 2.0 * (dn - 1) / dn;
  if (op == "allgather" || op == "reducescatter") return (dn - 1) / dn;
  if (op == "broadcast") return 1.0;
  return 0;
}

Communicator::Communicator() : timeout_s_(env_timeout()) {}

void Communicator::set_timeout(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    throw_usage("communication timeout must be a positive number of seconds (got " + std::to_string(seconds) + ")",
                "dist timeout", "e.g. --dist-timeout 300");
  timeout_s_ = seconds;
}

void Communicator::check_usable(const char* op) const {
  if (broken_)
    throw_env(std::string("dist: ") + op + " on a communicator whose earlier collective failed (rank " +
                  std::to_string(rank()) + " of " + std::to_string(size()) + ")",
              std::string("dist.") + backend(), "the job cannot continue: restart it from the last checkpoint");
}

void Communicator::timed_out(const std::string& op, size_t bytes) {
  broken_ = true;
  char t[32];
  std::snprintf(t, sizeof t, "%g", timeout_s_);
  throw_env("dist: " + op + " of " + human_bytes(bytes) + " on rank " + std::to_string(rank()) + " of " +
                std::to_string(size()) + " did not complete within " + t +
                " s: another rank died or hangs",
            std::string("dist.") + backend(),
            "check the other ranks' output; raise the timeout (--dist-timeout / RTX_DIST_TIMEOUT) if a step "
            "legitimately takes longer");
}

void Communicator::publish(const char* op, size_t bytes, double seconds) const {
  if (!telemetry::enabled()) return;
  const double algbw = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  telemetry::publish(telemetry::topic::dist_collective,
                     {{"op", op},
                      {"backend", backend()},
                      {"bytes", bytes},
                      {"ranks", size()},
                      {"rank", rank()},
                      {"time_s", seconds},
                      {"algbw", algbw},
                      {"busbw", algbw * busbw_factor(op, size())}});
}

void Communicator::allreduce_sum(float* data, size_t n) {
  check_usable("allreduce");
  if (n > 0 && !data) throw_usage("dist: allreduce_sum of " + std::to_string(n) + " floats at a null pointer", "allreduce");
  const double t0 = now_s();
  if (n > 0) do_allreduce_sum(data, n, 4);
  publish("allreduce", n * sizeof(float), now_s() - t0);
}

void Communicator::allreduce_sum(double* data, size_t n) {
  check_usable("allreduce");
  if (n > 0 && !data) throw_usage("dist: allreduce_sum of " + std::to_string(n) + " doubles at a null pointer", "allreduce");
  const double t0 = now_s();
  if (n > 0) do_allreduce_sum(data, n, 8);
  publish("allreduce", n * sizeof(double), now_s() - t0);
}

void Communicator::broadcast(void* data, size_t bytes, int root) {
  check_usable("broadcast");
  if (root < 0 || root >= size())
    throw_usage("dist: broadcast root " + std::to_string(root) + " is not a rank of this group of " +
                    std::to_string(size()),
                "broadcast");
  if (bytes > 0 && !data) throw_usage("dist: broadcast of " + std::to_string(bytes) + " B at a null pointer", "broadcast");
  const double t0 = now_s();
  if (bytes > 0) do_broadcast(data, bytes, root);
  publish("broadcast", bytes, now_s() - t0);
}

void Communicator::allgather(const void* send, void* recv, size_t bytes) {
  check_usable("allgather");
  if (bytes > 0 && (!send || !recv)) throw_usage("dist: allgather with a null buffer", "allgather");
  const double t0 = now_s();
  if (bytes > 0) do_allgather(send, recv, bytes);
  publish("allgather", bytes * static_cast<size_t>(size()), now_s() - t0);
}

void Communicator::barrier() {
  check_usable("barrier");
  const double t0 = now_s();
  do_barrier();
  publish("barrier", 0, now_s() - t0);
}

void SingleComm::do_allgather(const void* send, void* recv, size_t bytes) {
  if (send != recv) std::memmove(recv, send, bytes);
}

std::string mpiexec_path() {
#ifdef RTX_MPIEXEC
  if (::access(RTX_MPIEXEC, X_OK) == 0) return RTX_MPIEXEC;
#endif
  return "";
}

bool have_mpi() noexcept {
#ifdef RTX_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool have_nccl() noexcept {
#ifdef RTX_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() noexcept {
  if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMIX_RANK") || env_set("PMI_SIZE")) return true;
  return env_set("SLURM_PROCID") && env_int("SLURM_NTASKS", 1) > 1;
}

int local_rank_from_env() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}) {
    const int v = env_int(name, -1);
    if (v >= 0) return v;
  }
  return -1;
}

Communicator& world() {
  static std::once_flag once;
  static std::unique_ptr<Communicator> w;
  std::call_once(once, [] {
    if (launched_by_mpi()) {
#ifdef RTX_HAVE_MPI
      w = detail::make_mpi_world();
#else
      throw_env("this process was started by an MPI launcher (mpirun/srun) but rtx was built without MPI: every rank "
                    "would train alone",
                "dist.world", "install libopenmpi-dev and rebuild, or run without mpirun");
#endif
    }
    if (!w) w = std::make_unique<SingleComm>();
  });
  if (!w) throw_env("dist: the world communicator could not be made (an earlier attempt failed)", "dist.world");
  return *w;
}

bool thread_capable(const Communicator& comm) {
  const std::string b = comm.backend();
  if (b == "single" || b == "nccl") return true;
#ifdef RTX_HAVE_MPI
  if (b == "mpi") return detail::mpi_thread_serialized(comm);
#endif
  return false;
}

std::unique_ptr<Communicator> make_nccl(Communicator& host, int device) {
#ifdef RTX_HAVE_NCCL
  return detail::make_nccl_comm(host, device);
#else
  (void)host;
  (void)device;
  throw_env("NCCL communicator requested but rtx was built without NCCL (CUDA toolkit with nccl.h and libnccl)",
            "dist.nccl", "rebuild with -DRTX_CUDA=ON on a machine with NCCL, or train on the CPU backend");
#endif
}

namespace {

/// First key (in rank 0's order, recursing into objects) whose value differs; "" if none.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix,
                             std::string& va, std::string& vb) {
  if (a.is_object() && b.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (!b.contains(it.key())) {
        va = it.value().dump();
        vb = "(missing)";
        return key;
      }
      const std::string d = first_difference(it.value(), b.at(it.key()), key, va, vb);
      if (!d.empty()) return d;
    }
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!a.contains(it.key())) {
        va = "(missing)";
        vb = it.value().dump();
        return prefix.empty() ? it.key() : prefix + "." + it.key();
      }
    return "";
  }
  if (a != b) {
    va = a.dump();
    vb = b.dump();
    return prefix.empty() ? "(value)" : prefix;
  }
  return "";
}

std::string hex(uint64_t h) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace

void require_same(Communicator& comm, const std::string& what, const std::string& value) {
  const int n = comm.size(), me = comm.rank();
  if (n == 1) return;
  const uint64_t mine = kernels::fnv1a64(value.data(), value.size());
  std::vector<uint64_t> all(static_cast<size_t>(n));
  comm.allgather(&mine, all.data(), sizeof mine);
  std::vector<int> differ;
  for (int r = 1; r < n; ++r)
    if (all[static_cast<size_t>(r)] != all[0]) differ.push_back(r);
  if (differ.empty()) return;
  // Rank 0's text, so a differing rank can say which field differs.
  uint64_t len = value.size();
  comm.broadcast(&len, sizeof len, 0);
  std::string ref(static_cast<size_t>(len), '\0');
  if (me == 0) ref = value;
  comm.broadcast(ref.data(), ref.size(), 0);
  std::string ranks;
  for (int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  std::string msg = "ranks disagree on the " + what + ": rank 0 has hash " + hex(all[0]) + ", rank" +
                    (differ.size() > 1 ? "s " : " ") + ranks + " ha" + (differ.size() > 1 ? "ve " : "s ") +
                    hex(all[static_cast<size_t>(differ[0])]);
  if (all[static_cast<size_t>(me)] != all[0]) {
    const nlohmann::json a = nlohmann::json::parse(ref, nullptr, false);
    const nlohmann::json b = nlohmann::json::parse(value, nullptr, false);
    if (!a.is_discarded() && !b.is_discarded()) {
      std::string va, vb;
      const std::string key = first_difference(a, b, "", va, vb);
      if (!key.empty())
        msg += "; first difference at '" + key + "': rank 0 has " + va + ", rank " + std::to_string(me) + " has " + vb;
    }
  }
  throw_input(msg, "dist." + what, "launch every rank with the same configuration and data");
}

}  // namespace rtx::dist
