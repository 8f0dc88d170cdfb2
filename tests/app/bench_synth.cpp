// A private registry for rtx-bench tests: "synth_spin", whose samples have a KNOWN
// distribution (log-normal around US microseconds, optional slowdown), so the runner and
// the compare verdicts can be tested without depending on this shared machine's noise.
// Shape dims: US (median time, us), NOISE (sigma of the log-normal, in 1/1000); optional
// SLOW (slowdown in %, default 0), BAD (1: check() fails). Each sample also spins ~20 us of real time
// so time budgets (--max-time) are exercised for real. Also "synth_cuda_only" (a CUDA
// variant only) and "synth_picky" (a variant whose validate() rejects odd N, f32 only).
#include <chrono>
#include <cmath>
#include <memory>

#include "rtx/core/error.hpp"
#include "rtx/core/philox.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/registry.hpp"

using namespace rtx;
using namespace rtx::kernels;

/// Count of flush_cache() and run() calls on synthetic instances (tests read them).
int g_synth_flushes = 0;
long g_synth_runs = 0;

namespace {

class SpinInstance final : public Instance {
 public:
  SpinInstance(const Shape& s, uint64_t seed) : s_(s), rng_(seed, 77) {
    for (const char* d : {"US", "NOISE"})
      if (!s.count(d)) throw_input(std::string("synth_spin needs dim ") + d, "shape");
  }
  void run() override {
    ++g_synth_runs;
    spin(20e-6);
  }
  double timed_run() override {
    spin(20e-6);
    const double slow = s_.count("SLOW") ? static_cast<double>(s_.at("SLOW")) : 0.0;
    const double us = static_cast<double>(s_.at("US")) * (1 + slow / 100);
    const double sigma = static_cast<double>(s_.at("NOISE")) / 1000;
    return us * 1e-6 * std::exp(sigma * rng_.next_normal());
  }
  void flush_cache() override { ++g_synth_flushes; }
  CheckResult check() override {
    CheckResult r;
    r.max_rel_err = s_.count("BAD") && s_.at("BAD") ? 1.0 : 0.0;
    finish_check(r, 1e-6);
    return r;
  }
  uint64_t checksum() override {
    const std::string k = shape_to_string(s_);
    return fnv1a64(k.data(), k.size());
  }
  size_t footprint_bytes() const override { return 64; }

 private:
  static void spin(double s) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < s) {
    }
  }
  Shape s_;
  Philox rng_;
};

}  // namespace

Registry synth_registry() {
  Registry r;
  {
    OpDef op;
    op.name = "synth_spin";
    op.doc = "synthetic op with a known time distribution";
    op.dims = {"US", "NOISE"};
    op.optional_dims = {"SLOW", "BAD"};
    op.work = [](const Shape& s, DType) { return Work{1e6 * static_cast<double>(s.at("US")), 1e3 * static_cast<double>(s.at("US"))}; };
    Variant v;
    v.name = "cpu.spin";
    v.backend = Backend::CPU;
    v.dtypes = {DType::F32, DType::BF16};
    v.space.params = {Param{"P", {1, 2}, 1, "unused"}};
    v.make = [](const Shape& s, DType, const Params&, uint64_t seed) { return std::make_unique<SpinInstance>(s, seed); };
    op.variants.push_back(v);
    r.add(op);
  }
  {
    OpDef op;
    op.name = "synth_cuda_only";
    op.dims = {"N"};
    op.work = [](const Shape&, DType) { return Work{}; };
    Variant v;
    v.name = "cuda.only";
    v.backend = Backend::CUDA;
    v.dtypes = {DType::F32};
    v.make = [](const Shape&, DType, const Params&, uint64_t) -> std::unique_ptr<Instance> {
      throw_env("no GPU in tests");
    };
    op.variants.push_back(v);
    r.add(op);
  }
  {
    OpDef op;
    op.name = "synth_picky";
    op.dims = {"N"};
    op.work = [](const Shape&, DType) { return Work{}; };
    Variant v;
    v.name = "cpu.picky";
    v.backend = Backend::CPU;
    v.dtypes = {DType::F32};
    v.validate = [](const Shape& s, const Params&) { return s.at("N") % 2 ? std::string("N must be even") : std::string(); };
    v.make = [](const Shape& s, DType, const Params&, uint64_t seed) {
      Shape t{{"US", 10}, {"NOISE", 1}, {"SLOW", 0}, {"N", s.at("N")}};
      return std::make_unique<SpinInstance>(t, seed);
    };
    op.variants.push_back(v);
    r.add(op);
  }
  return r;
}
