# CPU op sources other than matmul (owned by the ops engineer): the per-ISA bodies of the
# bandwidth-bound ops, their dispatch, attention (entry points + per-ISA flash kernels of attention_simd.inc),
# allreduce, registration and problem factories.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/ops_scalar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops_avx2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops_avx512.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_scalar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_avx2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_avx512.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops_register.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../problems_ops.cpp
)
# Benchmark power tests only (bench/compare_false_alarms.sh): a build whose gelu_forward does 10%
# more work, the planted slowdown rtx-bench compare must find. Off in every normal build.
if(RTX_PLANT_GELU_SLOWDOWN)
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/ops_cpu.cpp PROPERTIES COMPILE_DEFINITIONS RTX_PLANT_GELU_SLOWDOWN=1)
endif()
