# tests: GGUF export of GPT-2.
rtx_add_test(models_export_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/export_test.cpp LABELS cpu)
