// Test program for rtx-trace record --cpu-sample: three named functions burn CPU in the ratio
// 6:3:1 (hot_a, hot_b, hot_c: the same loop, 6N, 3N and N iterations), called from main (or
// from worker threads). Built with -O1 -fno-omit-frame-pointer so the kernel's frame-pointer
// call chains reach main.
//   sampler_hot [UNITS] [THREADS]   UNITS: rounds of the 6:3:1 work (default 40), THREADS:
//                                   run the rounds on that many threads (default 0: on main)
#include <cstdlib>
#include <thread>
#include <vector>

namespace {
volatile double g_sink;

}  // namespace

// Keeps the hot functions non-leaf: GCC gives a leaf function no frame (even with
// -fno-omit-frame-pointer), and the kernel's frame-pointer walk then skips its caller.
extern "C" __attribute__((noinline)) void keep(double x) { g_sink = x; }

namespace {
// One loop body for all three, so their cost per iteration is the same.
inline double burn(long n, double x) {
  for (long i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9;
  keep(x);
  return x;
}
}  // namespace

constexpr long kIters = 1000000;

extern "C" __attribute__((noinline)) double hot_a(double x) { return burn(6 * kIters, x) + 1; }
extern "C" __attribute__((noinline)) double hot_b(double x) { return burn(3 * kIters, x) + 2; }
extern "C" __attribute__((noinline)) double hot_c(double x) { return burn(kIters, x) + 3; }

__attribute__((noinline)) void rounds(long units) {
  double x = 1;
  for (long u = 0; u < units; ++u) x = hot_c(hot_b(hot_a(x)));
  g_sink = x;
}

int main(int argc, char** argv) {
  const long units = argc > 1 ? std::atol(argv[1]) : 40;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  if (threads <= 0) {
    rounds(units);
    return 0;
  }
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(rounds, units);
  for (auto& t : ts) t.join();
  return 0;
}
