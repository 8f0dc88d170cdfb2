# core: errors, dtypes, RNG, tensors, allocators, device discovery.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/error.cpp
  ${CMAKE_CURRENT_LIST_DIR}/events.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dtype.cpp
  ${CMAKE_CURRENT_LIST_DIR}/philox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_nocuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/driver_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/printable.cpp
  ${CMAKE_CURRENT_LIST_DIR}/hash.cpp
  ${CMAKE_CURRENT_LIST_DIR}/time.cpp
  ${CMAKE_CURRENT_LIST_DIR}/names.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allocator.cpp
)
list(APPEND RTX_COMMON_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda/device.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/allocator_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/rng_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/tensor_cuda.cu
)
