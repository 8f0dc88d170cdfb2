# CUDA kernel sources (owned by the CUDA engineer): launch functions (*.cu), the generic CUDA
# instance, and the registration of every CUDA variant (*.cpp: host-only code).
list(APPEND RTX_COMMON_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/register_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/instance_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/matmul_cublaslt.cu
  ${CMAKE_CURRENT_LIST_DIR}/matmul_tiled.cu
  ${CMAKE_CURRENT_LIST_DIR}/ops_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/embed_loss_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/matmul_register_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ops_register_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_nccl.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/sparse_register_cuda.cpp
)
