# tests for serve: the load generator (its command is `rtx-serve bench`).
rtx_add_test(serve_loadgen_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/loadgen_test.cpp LABELS cpu tsan)
