# io: atomic file output, text input, versioned JSON artifacts and the field validator;
# the bounded pickle reader of the Planetoid files (pickle.cpp);
# tokenizers and token datasets (tokenizer.cmake); safetensors and GGUF (formats.cmake).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pickle.cpp
  ${CMAKE_CURRENT_LIST_DIR}/idx.cpp
)
include(${CMAKE_CURRENT_LIST_DIR}/tokenizer.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/formats.cmake)
