# tests for tune: strategies on synthetic spaces, store records (resume, replay, profiles,
# export/import), run-time lookup, real-kernel measurement, and the rtx-tune CLI.
rtx_add_test(tune_search_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/search_test.cpp LABELS cpu)
rtx_add_test(tune_records_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/records_test.cpp LABELS cpu)
rtx_add_test(tune_measure_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/measure_test.cpp LABELS cpu tsan)
rtx_add_test(tune_cli_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tune_cli_test.cpp LABELS cpu cli)
add_dependencies(tune_cli_test rtx-tune)
