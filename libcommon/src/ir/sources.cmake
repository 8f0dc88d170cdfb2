# ir: the Polygraph IR (graph, shape functions, JSON/text/DOT, autodiff, planner, executors, passes, fusion).
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/graph.cpp
  ${CMAKE_CURRENT_LIST_DIR}/serialize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/planner.cpp
  ${CMAKE_CURRENT_LIST_DIR}/exec.cpp
  ${CMAKE_CURRENT_LIST_DIR}/autodiff.cpp
  ${CMAKE_CURRENT_LIST_DIR}/passes.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fusion.cpp
)
