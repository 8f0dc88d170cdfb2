# tests: safetensors (and the streaming AtomicFileWriter) and GGUF.
rtx_add_test(io_safetensors_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/safetensors_test.cpp LABELS cpu)
rtx_add_test(io_gguf_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf_test.cpp LABELS cpu)
