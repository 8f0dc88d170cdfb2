# Graph / sparse CPU ops (issue 40): kernels with their ISA dispatch, registration, problem factories.
list(APPEND RTX_COMMON_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/sparse_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_register.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../problems_sparse.cpp
)
