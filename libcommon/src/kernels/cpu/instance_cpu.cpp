// The generic CPU instance: owns 64-byte-aligned buffers, poisons outputs, times with a
// monotonic clock, checks against the problem's float64 reference.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <cstdlib>
#include <cstring>
#include <new>

#include "rtx/core/dtype.hpp"
#include "rtx/core/error.hpp"
#include "rtx/kernels/check.hpp"
#include "rtx/kernels/problem.hpp"

namespace rtx::kernels {
namespace {

/// 2 x the largest cache level sysfs reports for cpu0, clamped to [8 MiB, 1 GiB].
size_t flush_bytes() {
  size_t best = 0;
  for (int i = 0; i < 8; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
    std::string v;
    if (!(f >> v) || v.empty()) continue;
    size_t mult = 1;
    if (v.back() == 'K') mult = 1024;
    else if (v.back() == 'M') mult = 1024 * 1024;
    const size_t n = std::strtoull(v.c_str(), nullptr, 10) * mult;
    if (n > best) best = n;
  }
  return std::clamp<size_t>(2 * best, size_t{8} << 20, size_t{1} << 30);
}

struct AlignedBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit AlignedBuf(size_t n) : bytes(n) {
    p = std::aligned_alloc(64, ((n + 63) / 64) * 64 + 64);
    if (!p) throw std::bad_alloc();
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
};

class CpuInstance final : public Instance {
 public:
  CpuInstance(Problem p, const Params& params, double tol, Runner run)
      : p_(std::move(p)), params_(params), tol_(tol), run_(std::move(run)) {
    for (const auto& t : p_.inputs) {
      const bool bf = p_.dtype == DType::BF16 && !t.always_f32;
      auto b = std::make_unique<AlignedBuf>(t.data.size() * (bf ? 2 : 4));
      if (bf) {
        auto* h = static_cast<uint16_t*>(b->p);
        for (size_t i = 0; i < t.data.size(); ++i) h[i] = f32_to_bf16(t.data[i]);
      } else {
        std::memcpy(b->p, t.data.data(), t.data.size() * 4);
      }
      args_.in.push_back(b->p);
      bufs_.push_back(std::move(b));
    }
    for (const auto& o : p_.outputs) {
      auto b = std::make_unique<AlignedBuf>(o.size * 4);
      args_.out.push_back(static_cast<float*>(b->p));
      bufs_.push_back(std::move(b));
    }
    args_.ids = p_.ids.empty() ? nullptr : p_.ids.data();
    args_.shape = &p_.shape;
    args_.params = &params_;
    args_.dtype = p_.dtype;
    reset_outputs();
  }

  void run() override { run_(args_); }

  double timed_run() override {
    const auto t0 = std::chrono::steady_clock::now();
    run_(args_);
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(t1 - t0).count();
  }

  void flush_cache() override {
    // Twice the largest CPU cache (sysfs), clamped to [8 MiB, 1 GiB]; allocated once.
    static AlignedBuf scratch(flush_bytes());
    auto* s = static_cast<volatile unsigned char*>(scratch.p);
    for (size_t i = 0; i < scratch.bytes; i += 64) s[i] = static_cast<unsigned char>(s[i] + 1);
  }

  CheckResult check() override {
    reset_outputs();
    run_(args_);
    if (!ref_) ref_ = reference_of(p_);
    CheckResult r;
    if (ref_->size() != p_.outputs.size()) throw_internal("reference returned wrong number of outputs");
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      if ((*ref_)[i].size() != p_.outputs[i].size) throw_internal("reference size mismatch for " + p_.outputs[i].name);
      compare(args_.out[i], (*ref_)[i].data(), p_.outputs[i].size, p_.outputs[i].name.c_str(), r);
    }
    finish_check(r, tol_);
    return r;
  }

  uint64_t checksum() override {
    uint64_t h = kFnv1a64Basis;
    for (size_t i = 0; i < p_.outputs.size(); ++i) h = fnv1a64(args_.out[i], p_.outputs[i].size * 4, h);
    return h;
  }

  std::vector<std::vector<float>> output_values() override {
    std::vector<std::vector<float>> v;
    for (size_t i = 0; i < p_.outputs.size(); ++i) v.emplace_back(args_.out[i], args_.out[i] + p_.outputs[i].size);
    return v;
  }

  size_t footprint_bytes() const override {
    size_t n = p_.ids.size() * 4;
    for (const auto& b : bufs_) n += b->bytes;
    return n;
  }

 private:
  void reset_outputs() {
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const auto& o = p_.outputs[i];
      if (o.init.empty()) poison(args_.out[i], o.size);
      else std::memcpy(args_.out[i], o.init.data(), o.size * 4);
    }
  }

  Problem p_;
  Params params_;
  double tol_;
  Runner run_;
  RunArgs args_;
  std::vector<std::unique_ptr<AlignedBuf>> bufs_;
  std::shared_ptr<const Reference> ref_;
};

}  // namespace

std::unique_ptr<Instance> make_cpu_instance(Problem p, const Params& params, double tolerance, Runner run) {
  return std::make_unique<CpuInstance>(std::move(p), params, tolerance, std::move(run));
}

Variant cpu_variant(std::string name, ParamSpace space, std::function<std::string(const Shape&, const Params&)> validate,
                    ProblemFactory factory, Runner run, double tol_f32) {
  Variant v;
  v.name = std::move(name);
  v.backend = Backend::CPU;
  v.dtypes = {DType::F32};
  v.space = std::move(space);
  v.validate = validate;
  const std::string vname = v.name;
  v.make = [vname, validate, factory, run, tol_f32](const Shape& s, DType dt, const Params& p, uint64_t seed) {
    Problem prob = factory(s, dt, seed);  // throws Error(Input) on a bad shape or dtype first
    if (std::string why = validate(s, p); !why.empty())
      throw_input(vname + ": parameters " + params_to_string(p) + " rejected: " + why, "params",
                  "pick parameters from the variant's space");
    return make_cpu_instance(std::move(prob), p, tol_f32, run);
  };
  return v;
}

}  // namespace rtx::kernels
