# telemetry: hardware profile, event bus, JSON Lines sink, spans.
rtx_add_test(telemetry_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/hwprofile_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bus_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/producers_test.cpp
  LABELS cpu)
# Benchmark (not a test): ns per kernel record / span, sink on and off (docs/perf.md).
add_executable(events_bench ${CMAKE_CURRENT_LIST_DIR}/events_bench.cpp)
target_link_libraries(events_bench PRIVATE rtx::common)
rtx_target_defaults(events_bench)
set_target_properties(events_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
