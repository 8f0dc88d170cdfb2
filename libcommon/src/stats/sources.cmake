# stats: order statistics, median CI, Mann-Whitney U, Hodges-Lehmann, A/B verdicts.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/changepoint.cpp
)
