# rtx-doctor CLI tests: --json schema, exit codes for bad stores, usage errors.
rtx_add_test(cli_doctor_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/doctor_cli_test.cpp LABELS cpu cli)
add_dependencies(cli_doctor_test rtx-doctor)
