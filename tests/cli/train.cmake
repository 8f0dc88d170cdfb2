# rtx-train CLI tests: prepare/run/resume/sample/export end to end, exit codes for bad input.
rtx_add_test(cli_train_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_cli_test.cpp LABELS cpu cli LOADS_HOST)
add_dependencies(cli_train_test rtx-train)
rtx_add_test(cli_train_gcn_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_gcn_cli_test.cpp LABELS cpu cli)
add_dependencies(cli_train_gcn_test rtx-train)
rtx_add_test(cli_train_rl_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_rl_cli_test.cpp LABELS cpu cli)
add_dependencies(cli_train_rl_test rtx-train)
rtx_add_test(cli_train_dp_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_dp_cli_test.cpp LABELS cpu cli)
