# tests for io: atomic file writes, artifact schema checks, the field validator.
rtx_add_test(io_artifact_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/atomic_file_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/artifact_test.cpp
  LABELS cpu)
include(${CMAKE_CURRENT_LIST_DIR}/tokenizer.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/formats.cmake)
rtx_add_test(io_pickle_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/pickle_test.cpp LABELS cpu)
