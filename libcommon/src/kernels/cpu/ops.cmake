# CPU op sources other than matmul (owned by the ops engineer)
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/ops_register.cpp
)
