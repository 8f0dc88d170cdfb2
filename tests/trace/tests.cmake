# tests for trace: trace files, stats, merge, flame graphs, the rtx-trace and rtx-flame CLIs.
rtx_add_test(trace_lib_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_lib_test.cpp LABELS cpu)
rtx_add_test(trace_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/trace_cli_test.cpp LABELS cpu cli)
add_dependencies(trace_cli_test rtx-trace rtx-flame rtx-train rtx-bench)
# Benchmark input generator (not a test): trace_gen N out.json [out.folded].
add_executable(trace_gen ${CMAKE_CURRENT_LIST_DIR}/trace_gen.cpp)
target_link_libraries(trace_gen PRIVATE rtx::common)
rtx_target_defaults(trace_gen)
set_target_properties(trace_gen PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# CPU sampling (rtx-trace record --cpu-sample): a program with known hot functions (6:3:1),
# built with frame pointers everywhere (the kernel's call chains follow them), profiled by the test.
add_executable(sampler_hot ${CMAKE_CURRENT_LIST_DIR}/sampler_hot.cpp)
target_compile_options(sampler_hot PRIVATE -O1 -fno-omit-frame-pointer)
target_link_libraries(sampler_hot PRIVATE Threads::Threads)
set_target_properties(sampler_hot PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# The same program without frame pointers (as most release builds): --call-graph dwarf's case.
add_executable(sampler_hot_nofp ${CMAKE_CURRENT_LIST_DIR}/sampler_hot.cpp)
target_compile_options(sampler_hot_nofp PRIVATE -O2 -fomit-frame-pointer)
target_link_libraries(sampler_hot_nofp PRIVATE Threads::Threads)
set_target_properties(sampler_hot_nofp PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
rtx_add_test(sampler_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cpp LABELS cpu cli)
target_compile_definitions(sampler_test PRIVATE RTX_SAMPLER_HOT="$<TARGET_FILE:sampler_hot>"
                           RTX_SAMPLER_HOT_NOFP="$<TARGET_FILE:sampler_hot_nofp>")
add_dependencies(sampler_test rtx-trace rtx-flame sampler_hot sampler_hot_nofp)
