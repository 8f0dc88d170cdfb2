# tests for serve: the load generator.
rtx_add_test(serve_loadgen_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/loadgen_test.cpp LABELS cpu)

# serve_loadgen: the load generator as a command (bench/serve_vs_llamacpp.sh drives it); not a test.
add_executable(serve_loadgen ${CMAKE_CURRENT_LIST_DIR}/loadgen_main.cpp)
target_link_libraries(serve_loadgen PRIVATE rtx::common)
rtx_target_defaults(serve_loadgen)
set_target_properties(serve_loadgen PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
