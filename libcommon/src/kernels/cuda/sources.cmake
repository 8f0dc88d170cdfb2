# CUDA kernel sources (owned by the CUDA engineer)
list(APPEND RTX_COMMON_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/register_cuda.cu
)
