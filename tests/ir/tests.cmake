# ir: the Polygraph IR (graph, JSON/text/DOT, executors, autodiff gradchecks, planner, passes,
# random-graph differential test, fusion).
rtx_add_test(ir_graph_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/graph_test.cpp LABELS cpu)
rtx_add_test(ir_exec_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/exec_test.cpp LABELS cpu)
rtx_add_test(ir_planner_passes_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_passes_test.cpp LABELS cpu)
rtx_add_test(ir_random_graph_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/random_graph_test.cpp LABELS cpu)
rtx_add_test(ir_example_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/example_test.cpp LABELS cpu)
rtx_add_test(ir_fusion_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fusion_test.cpp LABELS cpu)
# fusion_bench: the GPT-2 MLP block unfused vs fused through ir::Executor (not a ctest test).
add_executable(fusion_bench ${CMAKE_CURRENT_LIST_DIR}/fusion_bench.cpp)
target_link_libraries(fusion_bench PRIVATE rtx::common)
rtx_target_defaults(fusion_bench)
set_target_properties(fusion_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
