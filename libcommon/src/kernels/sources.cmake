# kernels: the op registry, CPU variants (cpu/), CUDA variants (cuda/), float64 references.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/registry.cpp
  ${CMAKE_CURRENT_LIST_DIR}/check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu/register_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu/instance_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu/cpu_features.cpp
)
include(${CMAKE_CURRENT_LIST_DIR}/cpu/matmul.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cpu/ops.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cpu/sparse.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cuda/sources.cmake)
