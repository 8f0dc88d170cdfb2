# tests for models: Llama forward and tokenizer on the stories260k GGUF.
# llama_bench: an executable (not a ctest test) printing decode tokens/s for 1 and B sequences batched.
rtx_add_test(models_llama_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_test.cpp LABELS cpu)

add_executable(llama_bench ${CMAKE_CURRENT_LIST_DIR}/llama_bench.cpp)
target_link_libraries(llama_bench PRIVATE rtx::common)
rtx_target_defaults(llama_bench)
set_target_properties(llama_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
