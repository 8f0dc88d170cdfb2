# serve: paged KV cache, serving models (GPT-2 here, Llama in models/llama), model loading.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/kv_cache.cpp
)
