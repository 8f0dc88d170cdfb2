# geom: graph learning over the sparse kernels (issue 40): the Planetoid loader and GCN.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/planetoid.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gcn.cpp
)
