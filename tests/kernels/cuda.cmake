# CUDA kernel tests (owned by the CUDA engineer; ctest label cuda, selected by scripts/gpu-check)
# and, in CUDA builds, the cuda_bench micro-benchmark (an executable, not a ctest test).
rtx_add_test(kernels_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_test.cpp LABELS cuda)

if(RTX_HAVE_CUDA)
  add_executable(cuda_bench ${CMAKE_CURRENT_LIST_DIR}/cuda_bench.cpp)
  target_link_libraries(cuda_bench PRIVATE rtx::common)
  rtx_target_defaults(cuda_bench)
  set_target_properties(cuda_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endif()
