# tests for kernels
include(${CMAKE_CURRENT_LIST_DIR}/matmul.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/ops.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cuda.cmake)
