// CPU ISA detection (GCC/Clang __builtin_cpu_supports) and the RTX_ISA override.
#include "rtx/kernels/cpu_features.hpp"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>

namespace rtx::kernels {

Isa cpu_isa_supported() noexcept {
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
    return Isa::Scalar;
  }();
  return best;
}

bool cpu_has_f16c() noexcept {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool f16c = (c >> 29) & 1u, avx = (c >> 28) & 1u, osxsave = (c >> 27) & 1u;
    if (!(f16c && avx && osxsave)) return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6u) == 0x6u;  // XMM and YMM state enabled by the OS
  }();
  return has;
}

static std::atomic<bool> g_vnni_disabled{false};

bool cpu_has_avx512_vnni() noexcept {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return has && !g_vnni_disabled.load(std::memory_order_relaxed);
}

void set_avx512_vnni_disabled(bool disabled) noexcept { g_vnni_disabled.store(disabled, std::memory_order_relaxed); }

static std::atomic<int> g_active{-1};

static Isa clamp(Isa want) { return static_cast<int>(want) <= static_cast<int>(cpu_isa_supported()) ? want : cpu_isa_supported(); }

Isa cpu_isa_active() noexcept {
  int a = g_active.load(std::memory_order_relaxed);
  if (a >= 0) return static_cast<Isa>(a);
  Isa isa = cpu_isa_supported();
  if (const char* e = std::getenv("RTX_ISA")) {
    if (!std::strcmp(e, "scalar")) isa = Isa::Scalar;
    else if (!std::strcmp(e, "avx2")) isa = clamp(Isa::Avx2);
    else if (!std::strcmp(e, "avx512")) isa = clamp(Isa::Avx512);
    else if (*e) {
      static std::atomic<bool> warned{false};  // once per process, whichever thread asks first
      if (!warned.exchange(true))
        std::fprintf(stderr, "rtx: RTX_ISA='%s' is not scalar, avx2 or avx512; ignored (using %s)\n", e, isa_name(isa));
    }
  }
  g_active.store(static_cast<int>(isa), std::memory_order_relaxed);
  return isa;
}

void set_cpu_isa(Isa isa) noexcept { g_active.store(static_cast<int>(clamp(isa)), std::memory_order_relaxed); }

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace rtx::kernels
