rtx_add_test(core_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/error_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dtype_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/philox_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allocator_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/printable_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hash_time_text_test.cpp
  LABELS cpu)
# CUDA Philox fill, CUDA tensors and the CUDA allocator; each case skips without a GPU.
rtx_add_test(core_cuda_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/rng_cuda_test.cpp
  LABELS cuda)
