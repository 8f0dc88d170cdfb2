# rtx-doctor logic: checks, probes, report (CUDA probes under cuda/).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/doctor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/probes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_probes_nocuda.cpp
)
list(APPEND RTX_COMMON_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda/gpu_probes.cu
)
