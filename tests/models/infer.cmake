# tests: KV-cache inference and sampling (infer_test), and infer_bench (an executable, not a ctest
# test) printing prefill and decode tokens/s of random-weight GPT-2 shapes.
rtx_add_test(models_infer_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/infer_test.cpp LABELS cpu)
# The comparison with the training model's full-sequence forward compiles once gpt2_cpu.cpp is
# part of libcommon.
get_target_property(rtx_infer_common_sources rtx_models SOURCES)
if(rtx_infer_common_sources MATCHES "gpt2_cpu\\.cpp")
  target_compile_definitions(models_infer_test PRIVATE RTX_INFER_HAVE_GPT2=1)
endif()

add_executable(infer_bench ${CMAKE_CURRENT_LIST_DIR}/infer_bench.cpp)
target_link_libraries(infer_bench PRIVATE rtx::common)
rtx_target_defaults(infer_bench)
set_target_properties(infer_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
