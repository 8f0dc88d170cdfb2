# serve: rtx-serve's engine (serving models over a paged KV cache, the continuous-batching
# scheduler, the OpenAI-compatible HTTP server), its text handling and its load generator.
include(${CMAKE_CURRENT_LIST_DIR}/engine.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/llama.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/loadgen.cmake)
