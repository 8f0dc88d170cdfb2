# tests for serve: KV cache, serving models, scheduler, HTTP server.
rtx_add_test(serve_engine_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_test.cpp LABELS cpu)
rtx_add_test(serve_server_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/server_test.cpp LABELS cpu)
