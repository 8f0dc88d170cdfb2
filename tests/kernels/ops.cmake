# Tests and the benchmark of the non-matmul CPU ops and the generic registry walk (ops engineer).
rtx_add_test(kernels_ops_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/ops_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_test.cpp
  LABELS cpu)
rtx_add_test(kernels_registry_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/registry_test.cpp LABELS cpu)
rtx_add_test(kernels_registry_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/registry_test.cpp LABELS cuda)
target_compile_definitions(kernels_registry_cuda_test PRIVATE RTX_REGISTRY_CUDA_WALK=1)

# ops_bench: an executable (not a ctest test) printing GB/s vs a STREAM triad and flash vs naive times.
add_executable(ops_bench ${CMAKE_CURRENT_LIST_DIR}/ops_bench.cpp)
target_link_libraries(ops_bench PRIVATE rtx::common)
rtx_target_defaults(ops_bench)
set_target_properties(ops_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
