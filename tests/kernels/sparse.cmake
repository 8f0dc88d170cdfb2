# Tests of the graph / sparse ops (issue 40); the registry walk covers them too.
rtx_add_test(kernels_sparse_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sparse_test.cpp LABELS cpu)
