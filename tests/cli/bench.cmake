# rtx-bench CLI tests: the built tool run as a subprocess.
rtx_add_test(bench_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_cli_test.cpp LABELS cpu cli LOADS_HOST)
add_dependencies(bench_cli_test rtx-bench)
rtx_add_test(bench_rounds_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_rounds_test.cpp LABELS cpu cli)
add_dependencies(bench_rounds_test rtx-bench)
