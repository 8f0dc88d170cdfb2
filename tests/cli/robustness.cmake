# Robustness of the shared CLI plumbing and readers: invalid UTF-8 under --json, unreadable store
# rows, directories and devices as input files (tools run as subprocesses).
rtx_add_test(cli_robustness_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/robustness_cli_test.cpp LABELS cpu cli)
add_dependencies(cli_robustness_test rtx-evolve rtx-bench rtx-serve rtx-tune)
