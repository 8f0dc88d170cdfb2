# io: tokenizers (char, GPT-2 BPE) and token datasets.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_common.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_char.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer_gpt2.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset.cpp
)
