// cuda_bench: GPU micro-benchmark of the CUDA variants through the registry (not a ctest test).
// Times matmul (cuBLASLt vs tiled, f32 and bf16, 4096^3 and a small tiled sweep), flash vs naive
// attention (B=4 T=1024 NH=12 HS=64) and bandwidth-bound ops; prints ms, TFLOP/s, GB/s.
// Usage: cuda_bench [--reps N] [--quick]   (cold L2: the instance's flush_cache before each rep)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "rtx/core/device.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/registry.hpp"

using namespace rtx;
using namespace rtx::kernels;

namespace {

struct Row {
  std::string op, variant, dtype, shape, params, status;
  double ms = 0, tflops = 0, gbs = 0;
};

/// Median seconds of `reps` timed runs after 2 warm-up runs, each preceded by a cache flush.
double median_time(Instance& inst, int reps) {
  for (int i = 0; i < 2; ++i) inst.run();
  inst.sync();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    inst.flush_cache();
    t.push_back(inst.timed_run());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Row bench(const std::string& op_name, const std::string& var, DType dt, const Shape& s, Params p, int reps,
          bool check) {
  Row r{op_name, var, dtype_name(dt), shape_to_string(s), "", "ok"};
  try {
    const OpDef& op = registry().op(op_name);
    const Variant& v = registry().variant(op_name, var);
    Params full = v.space.defaults();
    for (const auto& [k, val] : p) full[k] = val;
    r.params = params_to_string(full);
    if (v.validate) {
      const std::string why = v.validate(s, full);
      if (!why.empty()) {
        r.status = "skip: " + why;
        return r;
      }
    }
    auto inst = v.make(s, dt, full, 1);
    const double sec = median_time(*inst, reps);
    const Work w = op.work(s, dt);
    r.ms = sec * 1e3;
    r.tflops = w.flops / sec * 1e-12;
    r.gbs = w.bytes / sec * 1e-9;
    if (check) {
      const CheckResult c = inst->check();
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s (err %.1e)", c.ok ? "ok" : "CHECK FAILED", c.max_rel_err);
      r.status = buf;
    }
  } catch (const std::exception& e) {
    r.status = std::string("error: ") + e.what();
  }
  return r;
}

void print(const std::vector<Row>& rows) {
  std::printf("%-19s %-14s %-5s %-30s %-26s %10s %9s %9s  %s\n", "op", "variant", "dtype", "shape", "params", "ms",
              "TFLOP/s", "GB/s", "status");
  for (const Row& r : rows)
    std::printf("%-19s %-14s %-5s %-30s %-26s %10.4f %9.2f %9.1f  %s\n", r.op.c_str(), r.variant.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.params.c_str(), r.ms, r.tflops, r.gbs, r.status.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: cuda_bench [--reps N] [--quick]\n");
      return 2;
    }
  }
  try {
    require_cuda("cuda_bench");
  } catch (const rtx::Error& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 3;
  }
  std::vector<Row> rows;
  auto add = [&](Row r) {
    rows.push_back(r);
    std::fprintf(stderr, "  %s %s %s %s: %.4f ms %s\n", r.op.c_str(), r.variant.c_str(), r.dtype.c_str(),
                 r.params.c_str(), r.ms, r.status.c_str());
  };
  const int64_t n = quick ? 2048 : 4096;
  const Shape mm{{"M", n}, {"N", n}, {"K", n}, {"bias", 0}};
  for (DType dt : {DType::F32, DType::BF16}) {
    add(bench("matmul_forward", "cuda.cublaslt", dt, mm, {}, reps, false));
    add(bench("matmul_forward", "cuda.tiled", dt, mm, {}, reps, false));
    if (!quick)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t st : {2, 3}) add(bench("matmul_forward", "cuda.tiled", dt, mm, {{"config", c}, {"stages", st}}, 5, false));
  }
  // GPT-2 124M fc layer (B*T = 4096): forward with bias and backward, bf16.
  const Shape fc{{"M", 4096}, {"N", 3072}, {"K", 768}};
  add(bench("matmul_forward", "cuda.cublaslt", DType::BF16, fc, {}, reps, false));
  add(bench("matmul_forward", "cuda.tiled", DType::BF16, fc, {}, reps, false));
  add(bench("matmul_backward", "cuda.cublaslt", DType::BF16, fc, {}, reps, false));
  add(bench("matmul_backward", "cuda.tiled", DType::BF16, fc, {}, reps, false));

  const Shape att{{"B", 4}, {"T", 1024}, {"NH", 12}, {"HS", 64}};
  add(bench("attention_forward", "cuda.flash", DType::F32, att, {}, reps, false));
  for (int64_t br : {4, 16, 32})
    for (int64_t bc : {32, 128}) add(bench("attention_forward", "cuda.flash", DType::F32, att, {{"Br", br}, {"Bc", bc}}, 5, false));
  add(bench("attention_forward", "cuda.naive", DType::F32, att, {}, reps, false));
  add(bench("attention_backward", "cuda.v1", DType::F32, {{"B", 1}, {"T", 1024}, {"NH", 12}, {"HS", 64}}, {}, 5, false));

  // Bandwidth-bound ops at GPT-2 sizes (checked against the float64 reference as well).
  add(bench("layernorm_forward", "cuda.v1", DType::F32, {{"N", 4096}, {"C", 768}}, {}, reps, true));
  add(bench("layernorm_backward", "cuda.v1", DType::F32, {{"N", 4096}, {"C", 768}}, {}, reps, true));
  add(bench("gelu_forward", "cuda.v1", DType::F32, {{"N", 4096 * 3072}}, {}, reps, true));
  add(bench("gelu_backward", "cuda.v1", DType::F32, {{"N", 4096 * 3072}}, {}, reps, true));
  add(bench("residual_forward", "cuda.v1", DType::F32, {{"N", 4096 * 768}}, {}, reps, true));
  add(bench("softmax_forward", "cuda.v1", DType::F32, {{"N", 4096}, {"C", 1024}}, {}, reps, true));
  add(bench("adamw_update", "cuda.v1", DType::F32, {{"N", 124 * 1000 * 1000 / 8}}, {}, reps, true));
  add(bench("crossentropy_forward", "cuda.v1", DType::F32, {{"N", 1024}, {"V", 50257}}, {}, 5, true));

  std::printf("\ncuda_bench (median of %d cold-L2 runs; TFLOP/s and GB/s from each op's work model)\n", reps);
  print(rows);
  bool failed = false;
  for (const Row& r : rows) failed = failed || r.status.rfind("CHECK FAILED", 0) == 0 || r.status.rfind("error", 0) == 0;
  return failed ? 1 : 0;
}
