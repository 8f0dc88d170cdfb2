# tests: tokenizers and datasets.
rtx_add_test(io_tokenizer_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset_test.cpp
  LABELS cpu)
