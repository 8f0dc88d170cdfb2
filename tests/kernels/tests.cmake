# tests for kernels
include(${CMAKE_CURRENT_LIST_DIR}/matmul.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/ops.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/sparse.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/cuda.cmake)
rtx_add_test(kernels_reference_cache_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/reference_cache_test.cpp LABELS cpu)
target_include_directories(kernels_reference_cache_test PRIVATE ${CMAKE_SOURCE_DIR}/libcommon/src)
