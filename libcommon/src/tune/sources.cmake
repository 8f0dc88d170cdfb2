# tune: search strategies, trial records, profiles, run-time parameter lookup.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/search.cpp
  ${CMAKE_CURRENT_LIST_DIR}/measure.cpp
  ${CMAKE_CURRENT_LIST_DIR}/records.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lookup.cpp
  ${CMAKE_CURRENT_LIST_DIR}/efficiency.cpp
)
