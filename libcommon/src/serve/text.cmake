# serve: text (incremental detokenizing, stop strings, UTF-8) and the OpenAI request/response protocol.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/text.cpp
  ${CMAKE_CURRENT_LIST_DIR}/openai.cpp
)
