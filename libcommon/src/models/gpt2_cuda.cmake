# models: the GPT-2 CUDA backend (make_gpt2_cuda), built only with the CUDA toolkit; without it
# gpt2.cpp's fallback make_gpt2_cuda throws Error(Environment).
if(RTX_HAVE_CUDA)
  list(APPEND RTX_COMMON_CUDA_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/cuda/gpt2_cuda.cu
  )
endif()
