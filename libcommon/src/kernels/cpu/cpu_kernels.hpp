// Internal: the CPU registration functions, each defined in its own file and called from
// register_cpu_kernels (cpu/register_cpu.cpp).
#pragma once
#include "rtx/kernels/registry.hpp"

namespace rtx::kernels {
void register_cpu_matmul(Registry& r);  // cpu/matmul*.cpp: matmul_forward, matmul_backward
void register_cpu_ops(Registry& r);     // cpu/ops*.cpp: every other op
void register_cpu_sparse(Registry& r);  // cpu/sparse*.cpp: the graph / sparse ops (sparse.hpp)
}  // namespace rtx::kernels
