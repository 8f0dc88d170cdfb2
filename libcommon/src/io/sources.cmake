# io: atomic file output, text input, versioned JSON artifacts and the field validator.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact.cpp
)
