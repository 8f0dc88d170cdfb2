# models: KV-cache inference (Gpt2Decoder) and sampling/generation.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/infer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sampling.cpp
)
