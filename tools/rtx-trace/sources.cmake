# rtx-trace: the CLI (record/stats/merge/validate) and, in CUDA builds, the CUPTI injection
# library librtx_cupti_inject.so (loaded by the CUDA driver through CUDA_INJECTION64_PATH).
rtx_add_tool(rtx-trace SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rtx-trace/main.cpp)
if(RTX_HAVE_CUDA)
  find_library(RTX_CUPTI_LIBRARY cupti
    HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_TARGET_DIR}/lib ${CUDAToolkit_ROOT}/extras/CUPTI/lib64
          /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  find_path(RTX_CUPTI_INCLUDE cupti.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_ROOT}/extras/CUPTI/include
          /usr/local/cuda/extras/CUPTI/include /usr/local/cuda/targets/x86_64-linux/include)
  if(RTX_CUPTI_LIBRARY AND RTX_CUPTI_INCLUDE)
    message(STATUS "rtx: CUPTI ${RTX_CUPTI_LIBRARY}: rtx-trace records CUDA activity")
    add_library(rtx_cupti_inject SHARED ${CMAKE_CURRENT_SOURCE_DIR}/rtx-trace/cupti_inject.cpp)
    target_include_directories(rtx_cupti_inject PRIVATE ${RTX_CUPTI_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
    target_link_libraries(rtx_cupti_inject PRIVATE ${RTX_CUPTI_LIBRARY} Threads::Threads)
    set_target_properties(rtx_cupti_inject PROPERTIES
      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib CXX_VISIBILITY_PRESET hidden)
    rtx_target_defaults(rtx_cupti_inject)
    target_compile_definitions(rtx-trace PRIVATE RTX_CUPTI_LIBRARY="${RTX_CUPTI_LIBRARY}")
    add_dependencies(rtx-trace rtx_cupti_inject)
  else()
    message(STATUS "rtx: CUPTI not found: rtx-trace records engine spans only")
  endif()
endif()
