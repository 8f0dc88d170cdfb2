# rtx-serve bench CLI tests: the built tool run as a subprocess (flag errors, failed runs, --help).
# LOADS_HOST: one case spins rtx::test::BusyHost to check the busy-host warning (run alone under ctest -j).
rtx_add_test(serve_bench_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_bench_cli_test.cpp LABELS cpu cli LOADS_HOST)
add_dependencies(serve_bench_cli_test rtx-serve)
# rtx-serve run CLI tests: flag values refused at start (exit 2), before the server listens.
rtx_add_test(serve_run_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_run_cli_test.cpp LABELS cpu cli)
add_dependencies(serve_run_cli_test rtx-serve)
