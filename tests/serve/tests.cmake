# tests for serve: the engine (KV cache, models, scheduler, HTTP server), text handling, the load generator.
include(${CMAKE_CURRENT_LIST_DIR}/engine.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/llama.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/text.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/loadgen.cmake)
