# tests for trace: trace files, stats, merge, flame graphs, the rtx-trace and rtx-flame CLIs.
rtx_add_test(trace_lib_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_lib_test.cpp LABELS cpu)
rtx_add_test(trace_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_cli_test.cpp LABELS cpu cli)
add_dependencies(trace_cli_test rtx-trace rtx-flame rtx-train rtx-bench)
# Benchmark input generator (not a test): trace_gen N out.json [out.folded].
add_executable(trace_gen ${CMAKE_CURRENT_LIST_DIR}/trace_gen.cpp)
target_link_libraries(trace_gen PRIVATE rtx::common)
rtx_target_defaults(trace_gen)
set_target_properties(trace_gen PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
