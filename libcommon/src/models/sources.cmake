# models: GPT-2 (config, layout, CPU and CUDA backends), KV-cache inference and sampling,
# checkpoints and export, the training loop.
include(${CMAKE_CURRENT_LIST_DIR}/gpt2.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/gpt2_cuda.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/infer.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/train.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/export.cmake)
