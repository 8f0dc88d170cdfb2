# trace: Chrome Trace Event writing/reading, trace statistics and merging, flame graphs (rtx-trace, rtx-flame).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/gzip_io.cpp
  ${CMAKE_CURRENT_LIST_DIR}/trace_event.cpp
  ${CMAKE_CURRENT_LIST_DIR}/folded.cpp
  ${CMAKE_CURRENT_LIST_DIR}/flamegraph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/merge.cpp
  ${CMAKE_CURRENT_LIST_DIR}/record.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_sampler.cpp)
