# telemetry: hardware profile, event bus, JSON Lines sink, spans.
rtx_add_test(telemetry_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/hwprofile_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bus_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/producers_test.cpp
  LABELS cpu)
