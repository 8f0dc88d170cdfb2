# models: GGUF export of GPT-2 (llama.cpp's "gpt2" architecture).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/export_gguf.cpp
)
