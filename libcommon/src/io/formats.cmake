# io: safetensors and GGUF readers/writers (and the shared read-only file mapping they use).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/mapped_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/safetensors.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gguf.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quants.cpp
)
