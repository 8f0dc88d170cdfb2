# tests for models: Llama forward and tokenizer on the stories260k GGUF.
rtx_add_test(serve_llama_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/llama_test.cpp LABELS cpu)

