# serve: paged KV cache and attention, serving models (GPT-2 here, Llama in models/llama), model loading.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/kv_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gpt2_serve.cpp
)
list(APPEND RTX_COMMON_SOURCES ${CMAKE_CURRENT_LIST_DIR}/scheduler.cpp ${CMAKE_CURRENT_LIST_DIR}/prefix_cache.cpp)
list(APPEND RTX_COMMON_SOURCES ${CMAKE_CURRENT_LIST_DIR}/load_model.cpp)
list(APPEND RTX_COMMON_SOURCES ${CMAKE_CURRENT_LIST_DIR}/server.cpp ${CMAKE_CURRENT_LIST_DIR}/http_guard.cpp)
list(APPEND RTX_COMMON_SOURCES ${CMAKE_CURRENT_LIST_DIR}/generate.cpp)
list(APPEND RTX_COMMON_SOURCES ${CMAKE_CURRENT_LIST_DIR}/tuning.cpp)
# The GPT-2 and Llama serving models on CUDA (--device cuda), built only with the CUDA toolkit;
# without it the fallbacks in gpt2_serve.cpp and models/llama.cpp throw Error(Environment).
if(RTX_HAVE_CUDA)
  list(APPEND RTX_COMMON_CUDA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda/gpt2_serve_cuda.cu
                                      ${CMAKE_CURRENT_LIST_DIR}/cuda/llama_serve_cuda.cu)
endif()
