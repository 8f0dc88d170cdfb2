// matmul_bench: times the CPU matmul variants cpu.blocked and cpu.blas (same thread count)
// and prints GFLOP/s, blocked/BLAS ratio and the blocked kernel's fraction of the FMA peak.
// A benchmark, not a test (not registered with ctest). Usage:
//   matmul_bench [--op forward|backward] [--dtype f32|bf16] [--reps N] [--shapes MxNxK,...]
//                [--MC v --NC v --KC v --MR v --NR v]
// "GF/s/core" = FLOP / process CPU seconds (all threads): robust to other load on the machine.
// Peak = threads x 2 FMA units x 16 fp32 lanes x 2 flop x clock ("cpu MHz" of /proc/cpuinfo).
#include <cblas.h>
#include <omp.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rtx/core/error.hpp"
#include "rtx/kernels/cpu_features.hpp"
#include "rtx/kernels/registry.hpp"

using namespace rtx::kernels;

namespace {

double cpu_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) return std::atof(line.substr(line.find(':') + 1).c_str());
  return 0;
}

/// Median and best seconds of a set of timed runs. On a shared, loaded machine the best
/// run is the better estimate of the kernel's own speed.
struct Times {
  double median, best;
};
/// Seconds of CPU time used by all threads of this process so far.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

Times summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[0]};
}

}  // namespace

int main(int argc, char** argv) {
  std::string op_name = "matmul_forward", dtype = "f32";
  std::string shapes = "1024x1024x1024,4096x2304x768,4096x768x768,4096x3072x768,4096x768x3072";
  int reps = 5;
  Params params;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "matmul_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--op") op_name = "matmul_" + next();
    else if (a == "--dtype") dtype = next();
    else if (a == "--reps") reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--shapes") shapes = next();
    else if (a == "--MC" || a == "--NC" || a == "--KC" || a == "--MR" || a == "--NR") params[a.substr(2)] = std::atoll(next().c_str());
    else {
      std::fprintf(stderr, "usage: matmul_bench [--op forward|backward] [--dtype f32|bf16] [--reps N] "
                           "[--shapes MxNxK,...] [--MC v --NC v --KC v --MR v --NR v]\n");
      return 2;
    }
  }
  try {
    const int threads = omp_get_max_threads();
    openblas_set_num_threads(threads);
    const double mhz = cpu_mhz();
    const double peak = threads * 2.0 * 16 * 2 * mhz * 1e6;
    const OpDef& op = registry().op(op_name);
    const rtx::DType dt = rtx::parse_dtype(dtype);
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    std::printf("# %s %s, threads=%d (OpenMP and OpenBLAS), isa=%s, clock %.0f MHz, fp32 FMA peak %.1f GFLOP/s\n",
                op_name.c_str(), dtype.c_str(), threads, isa_name(cpu_isa_active()), mhz, peak * 1e-9);
    std::printf("# OPENBLAS_CORETYPE=%s, blocked params {%s} (0/missing = ISA default), median and best of %d interleaved runs\n",
                core ? core : "(unset)", params_to_string(params).c_str(), reps);
    std::printf("%-16s %22s %22s %14s %14s %22s\n", "shape MxNxK", "blocked GF/s med/best", "blas GF/s med/best",
                "ratio med/best", "blk/peak best", "GF/s/core blk/blas");
    std::stringstream ss(shapes);
    std::string tok;
    while (std::getline(ss, tok, ',')) {
      const Shape s = parse_shape(tok, op.dims);
      const double flops = op.work(s, dt).flops;
      const Variant& blocked = registry().variant(op_name, "cpu.blocked");
      const Variant& blas = registry().variant(op_name, "cpu.blas");
      if (std::string why = blocked.validate(s, params); !why.empty()) {
        std::printf("%-18s skipped: %s\n", tok.c_str(), why.c_str());
        continue;
      }
      // Interleave the two variants rep by rep so load changes hit both alike.
      auto ib = blocked.make(s, dt, params, 1);
      auto il = blas.make(s, dt, {}, 1);
      // Also record process CPU time per run: flops / CPU-seconds ("GF/s per busy core") does not
      // depend on how much of the machine other processes take (spin-waits count against it).
      std::vector<double> vb, vl, cb, cl;
      ib->run();
      il->run();
      for (int r = 0; r < reps; ++r) {
        double c0 = process_cpu_seconds();
        vb.push_back(ib->timed_run());
        double c1 = process_cpu_seconds();
        vl.push_back(il->timed_run());
        double c2 = process_cpu_seconds();
        cb.push_back(c1 - c0);
        cl.push_back(c2 - c1);
      }
      const Times tb = summarize(vb), tl = summarize(vl), ub = summarize(cb), ul = summarize(cl);
      const double gbm = flops / tb.median * 1e-9, gbb = flops / tb.best * 1e-9;
      const double glm = flops / tl.median * 1e-9, glb = flops / tl.best * 1e-9;
      std::printf("%-16s %10.1f /%10.1f %10.1f /%10.1f %6.3f /%6.3f %14.3f %10.1f /%10.1f\n", tok.c_str(), gbm, gbb,
                  glm, glb, gbm / glm, gbb / glb, gbb * 1e9 / peak, flops / ub.median * 1e-9, flops / ul.median * 1e-9);
      std::fflush(stdout);
    }
  } catch (const rtx::Error& e) {
    std::fprintf(stderr, "matmul_bench: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
