# telemetry: hardware profile, event bus (JSON Lines sink), spans with NVTX ranges.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/hwprofile.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dynlibs.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_probe_nocuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bus.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpu_clock.cpp
)
list(APPEND RTX_COMMON_CUDA_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda/gpu_probe.cu
)
