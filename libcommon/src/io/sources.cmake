# io: atomic file output, text input, versioned JSON artifacts and the field validator;
# tokenizers and token datasets (tokenizer.cmake); safetensors and GGUF (formats.cmake).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact.cpp
)
include(${CMAKE_CURRENT_LIST_DIR}/tokenizer.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/formats.cmake)
