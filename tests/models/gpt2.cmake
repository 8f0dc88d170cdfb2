# tests: GPT-2 on CPU (parity with the PyTorch golden file tests/reference/data/gpt2_golden.json,
# determinism, accumulation, bad input) and the CPU training-step benchmark (not a ctest test).
rtx_add_test(models_gpt2_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpt2_test.cpp LABELS cpu)
# The golden file's path when the test runs outside ctest (no RTX_SOURCE_DIR).
target_compile_definitions(models_gpt2_test PRIVATE
  RTX_GPT2_GOLDEN="${CMAKE_SOURCE_DIR}/tests/reference/data/gpt2_golden.json")

# gpt2_bench: ms/step and tokens/s of forward+backward+AdamW on CPU for a preset.
add_executable(gpt2_bench ${CMAKE_CURRENT_LIST_DIR}/gpt2_bench.cpp)
target_link_libraries(gpt2_bench PRIVATE rtx::common)
rtx_target_defaults(gpt2_bench)
set_target_properties(gpt2_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
# GPT-2 through the Polygraph IR vs the hand-written model.
rtx_add_test(models_gpt2_graph_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpt2_graph_test.cpp LABELS cpu)
