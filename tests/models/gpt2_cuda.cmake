# GPT-2 CUDA backend tests (ctest label cuda, selected by scripts/gpu-check; they say SKIPPED and
# pass without a GPU) and, in CUDA builds, gpt2_cuda_bench (an executable in bin/, not a ctest test).
rtx_add_test(models_gpt2_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpt2_cuda_test.cpp LABELS cuda)
# The test calls the internal make_gpt2_cuda (src/models/gpt2_backend.hpp) for its argument checks.
target_include_directories(models_gpt2_cuda_test PRIVATE ${CMAKE_SOURCE_DIR}/libcommon/src)

if(RTX_HAVE_CUDA)
  add_executable(gpt2_cuda_bench ${CMAKE_CURRENT_LIST_DIR}/gpt2_cuda_bench.cpp)
  target_link_libraries(gpt2_cuda_bench PRIVATE rtx::common)
  rtx_target_defaults(gpt2_cuda_bench)
  set_target_properties(gpt2_cuda_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endif()

