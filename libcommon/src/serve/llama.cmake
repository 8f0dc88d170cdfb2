# serve: Llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) for serving, and its SentencePiece tokenizer.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/llama.cpp
  ${CMAKE_CURRENT_LIST_DIR}/llama_tokenizer.cpp
)
