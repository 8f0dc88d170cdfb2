// Benchmark (not a test): the cost of one kernel.launch record and one span, with the
// JSON Lines sink open (what rtx-trace record turns on) and with nothing listening.
//   events_bench [N=200000] [FILE=/tmp/events_bench.jsonl]
// Prints ns per record for: KernelRun off, KernelRun to the file, ScopedSpan to the file.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rtx/core/events.hpp"
#include "rtx/telemetry/bus.hpp"

namespace {
double ns_per(int n, void (*f)(int)) {
  const auto t0 = std::chrono::steady_clock::now();
  f(n);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}
void kernel_runs(int n) {
  for (int i = 0; i < n; ++i) rtx::core::KernelRun r("matmul_forward", "cpu.blocked.avx512", {{"M", 2048}, {"N", 1152}, {"K", 384}});
}
void spans(int n) {
  for (int i = 0; i < n; ++i) rtx::telemetry::ScopedSpan s("layer.3", rtx::telemetry::enabled() ? nlohmann::json{{"layer", 3}} : nlohmann::json());
}
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  const std::string file = argc > 2 ? argv[2] : "/tmp/events_bench.jsonl";
  std::remove(file.c_str());
  const double off = ns_per(n, kernel_runs);
  rtx::telemetry::open_event_file(file);
  const double on = ns_per(n, kernel_runs);
  const double span = ns_per(n, spans);
  rtx::telemetry::close_event_file();
  std::remove(file.c_str());
  std::printf("kernel record, nothing listening: %.1f ns\nkernel record, JSON Lines sink: %.1f ns\nspan, JSON Lines sink: %.1f ns\n", off, on, span);
  return 0;
}
