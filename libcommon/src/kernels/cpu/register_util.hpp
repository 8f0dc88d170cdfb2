// Internal: small helpers of the CPU registration files (ops_register.cpp, sparse_register.cpp):
// read a shape dim, an input pointer, or a tunable parameter with its default.
#pragma once
#include <cstdint>

#include "rtx/kernels/problem.hpp"

namespace rtx::kernels::reg_util {

/// Shape dim `k` as a double (0 when absent: an optional dim).
inline double D(const Shape& s, const char* k) {
  auto it = s.find(k);
  return it == s.end() ? 0.0 : static_cast<double>(it->second);
}
/// Shape dim `k` (std::out_of_range when absent: a required dim, checked by shape_problem).
inline int64_t I(const Shape& s, const char* k) { return s.at(k); }
/// Input i of a run as f32.
inline const float* fin(const RunArgs& a, size_t i) { return static_cast<const float*>(a.in[i]); }
/// Tunable parameter `k` of a run, or `dflt` when the variant's params do not set it.
inline int64_t param(const RunArgs& a, const char* k, int64_t dflt) {
  auto it = a.params->find(k);
  return it == a.params->end() ? dflt : it->second;
}

}  // namespace rtx::kernels::reg_util
