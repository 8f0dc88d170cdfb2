// Run-time CPU ISA dispatch for kernels: which vector paths this CPU supports, and the
// RTX_ISA override (scalar|avx2|avx512) that tests use to exercise every path.
#pragma once

namespace rtx::kernels {

/// Vector instruction-set levels CPU kernels are written for.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

/// Best level this CPU supports: Avx512 needs AVX-512 F+BW+VL+DQ; Avx2 needs AVX2+FMA.
Isa cpu_isa_supported() noexcept;
/// Level kernels should use: min(cpu_isa_supported(), $RTX_ISA if set). Read once at first call;
/// an unknown $RTX_ISA value is ignored (the doctor reports it).
Isa cpu_isa_active() noexcept;
/// Override the active level for this process (tests); clamped to what the CPU supports.
void set_cpu_isa(Isa isa) noexcept;
/// True when the CPU has F16C (vcvtph2ps/vcvtps2ph: CPUID leaf 1 ECX bit 29) and AVX
/// (ECX bit 28) with the OS saving YMM state (OSXSAVE, XGETBV XCR0 bits 1-2), per the Intel SDM
/// vol. 2A, CPUID. Read by cpuid, not __builtin_cpu_supports: clang 14 has no "f16c" name.
bool cpu_has_f16c() noexcept;
/// True when the CPU has AVX-512 VNNI (vpdpbusd), which the x16 int8 matmul tiles need, and
/// set_avx512_vnni_disabled(true) has not been called.
bool cpu_has_avx512_vnni() noexcept;
/// Tests: makes cpu_has_avx512_vnni() false (true: as without VNNI) so that weights packed
/// afterwards take the AVX-512-without-VNNI layouts; false restores the hardware answer.
void set_avx512_vnni_disabled(bool disabled) noexcept;
/// "scalar", "avx2", "avx512".
const char* isa_name(Isa isa) noexcept;

}  // namespace rtx::kernels
