# rtx-serve bench CLI tests: the built tool run as a subprocess (flag errors, failed runs, --help).
rtx_add_test(serve_bench_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_bench_cli_test.cpp LABELS cpu cli)
add_dependencies(serve_bench_cli_test rtx-serve)
