# rtx-bench logic: packs, runner (synthetic op with known timings), artifacts, compare.
rtx_add_test(bench_app_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/bench_synth.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_pack_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_runner_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_input_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_contention_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_compare_test.cpp
  LABELS cpu tsan)
