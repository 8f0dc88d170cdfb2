# tests for models: GPT-2 parity with PyTorch, CUDA vs CPU, KV-cache inference, training loop.
include(${CMAKE_CURRENT_LIST_DIR}/gpt2.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt2_cuda.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/infer.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/train.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/export.cmake)
rtx_add_test(models_gpt2_fusion_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpt2_fusion_test.cpp LABELS cpu)
