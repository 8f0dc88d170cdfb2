# stats: order statistics, median CI, Mann-Whitney U, Hodges-Lehmann, compare verdicts.
rtx_add_test(stats_test SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/stats_test.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compare_test.cpp
  LABELS cpu)
rtx_add_test(stats_changepoint_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/changepoint_test.cpp LABELS cpu)
